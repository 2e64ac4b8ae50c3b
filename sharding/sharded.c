/*
 * sharding/sharded.c - sharded variables: a variable split along axis 0 into
 * shards "name/part_i" laid out by ParameterServerStrategy's div rule, shard
 * i held by worker i mod W and nowhere else; creation (the spec agreed by
 * every worker, each owner filling its shards), reads with
 * ShardedVariable.__getitem__'s rules (rows fetched from their owners),
 * dense updates, sparse row updates (scatter: every update sent to the
 * owner of its row), and the row fetch that embedding lookups share
 * (lookup.c); the fetch's requests and the scatter's updates travel through
 * the same step (send_to_owners).
 *
 * Every call that involves other workers is made from the thread that owns
 * the strategy and is built on the runtime's cross-worker steps
 * (dvar_strategy_all_to_all, dvar_strategy_agree): a worker that fails
 * before a step still joins it with its failure, so every worker fails the
 * call with the same code and message and none is left waiting.
 *
 * Ownership: a variable owns its name, the shard names, the offsets and the
 * shards this worker holds; it borrows the strategy, which must outlive it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "runtime/runtime.h"
#include "sharding/sharded.h"

#ifndef __SIZEOF_INT128__
#error "sharding/sharded.c needs a compiler with __int128 (gcc or clang, 64-bit)"
#endif
__extension__ typedef __int128 i128;

#define NAME_MAX_BYTES 1000
#define SHAPE_TEXT_MAX (DVAR_MAX_RANK * 22 + 4)

enum update_kind { UPDATE_ASSIGN, UPDATE_ADD, UPDATE_SUB };
static const char *const update_names[] = { "assign", "assign_add", "assign_sub" };

/* ---------------------------------------------------------------- rows */

/* The shard that holds row r (0 <= r < rows): offsets only grow. */
static int64_t shard_of(const dvar_sharded_variable *v, int64_t r)
{
	int64_t lo = 0, hi = v->n; /* offsets[lo] <= r < offsets[hi] */

	if (v->shape.rank == 0)
		return 0;
	while (hi - lo > 1) {
		int64_t mid = lo + (hi - lo) / 2;

		if (v->offsets[mid] <= r)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static const unsigned char *row_at(const dvar_sharded_variable *v, int64_t shard, int64_t r)
{
	if (v->shape.rank == 0)
		return v->data[0];
	return v->data[shard] + (size_t)(r - v->offsets[shard]) * v->row_bytes;
}

/* Bytes of one shard (a scalar's only shard holds its one element). */
static size_t shard_bytes(const dvar_sharded_variable *v, int64_t i)
{
	if (v->shape.rank == 0)
		return v->esize;
	return (size_t)(v->offsets[i + 1] - v->offsets[i]) * v->row_bytes;
}

static size_t shard_start_bytes(const dvar_sharded_variable *v, int64_t i)
{
	return v->shape.rank == 0 ? 0 : (size_t)v->offsets[i] * v->row_bytes;
}

/* Elements sel selects from one row (dimensions 1..rank-1). */
static uint64_t selected_elems(const dvar_sharded_variable *v, const dvar_sharded_sel *sel)
{
	uint64_t n = 1;

	if (!sel)
		return v->row_elems;
	for (int d = 1; d < v->shape.rank; d++)
		n *= (uint64_t)sel[d - 1].count;
	return n;
}

/* Copy the elements sel selects from a row to out, in row-major order. */
static void extract(const dvar_sharded_variable *v, const unsigned char *row,
                    const dvar_sharded_sel *sel, unsigned char *out)
{
	int inner = v->shape.rank - 1;
	uint64_t stride[DVAR_MAX_RANK];
	int64_t idx[DVAR_MAX_RANK];
	size_t es = v->esize;
	const dvar_sharded_sel *last;
	int full = 1;

	if (inner <= 0 || !sel) {
		memcpy(out, row, v->row_bytes);
		return;
	}
	for (int d = 0; d < inner; d++) {
		if (sel[d].count == 0)
			return;
		full &= sel[d].start == 0 && sel[d].step == 1 && sel[d].count == v->shape.dims[d + 1];
	}
	if (full) {
		memcpy(out, row, v->row_bytes);
		return;
	}
	stride[inner - 1] = 1;
	for (int d = inner - 2; d >= 0; d--)
		stride[d] = stride[d + 1] * (uint64_t)v->shape.dims[d + 2];
	memset(idx, 0, sizeof idx);
	last = &sel[inner - 1];
	for (;;) {
		uint64_t base = 0;
		int d;

		for (d = 0; d < inner - 1; d++)
			base += (uint64_t)(sel[d].start + idx[d] * sel[d].step) * stride[d];
		if (last->step == 1) {
			memcpy(out, row + (size_t)(base + (uint64_t)last->start) * es,
			       (size_t)last->count * es);
			out += (size_t)last->count * es;
		} else {
			for (int64_t k = 0; k < last->count; k++) {
				memcpy(out, row + (size_t)(base + (uint64_t)(last->start + k * last->step)) * es,
				       es);
				out += es;
			}
		}
		for (d = inner - 2; d >= 0; d--) {
			if (++idx[d] < sel[d].count)
				break;
			idx[d] = 0;
		}
		if (d < 0)
			return;
	}
}

/* ---------------------------------------------------------------- fetching rows */

static int64_t get64(const unsigned char *p)
{
	int64_t x;

	memcpy(&x, p, sizeof x);
	return x;
}

static void put64(unsigned char *p, int64_t x)
{
	memcpy(p, &x, sizeof x);
}

/* A request's selection, checked against the variable: it came over the wire. */
static int check_sel(const dvar_sharded_variable *v, const dvar_sharded_sel *sel)
{
	for (int d = 1; d < v->shape.rank; d++) {
		const dvar_sharded_sel *s = &sel[d - 1];
		int64_t dim = v->shape.dims[d];
		i128 last;

		if (s->count < 0 || s->count > dim)
			return 0;
		if (s->count == 0)
			continue;
		last = (i128)s->start + (i128)(s->count - 1) * s->step;
		if (s->start < 0 || s->start >= dim || last < 0 || last >= dim)
			return 0;
	}
	return 1;
}

/*
 * The owner's side: requests from every worker (recv, packed by worker) to
 * the replies, packed by worker in *reply. A request is the selection
 * (rank - 1 triples) and then the rows; every row must be in a shard of
 * this worker.
 */
static int serve_requests(const dvar_sharded_variable *v, const unsigned char *recv,
                          const uint64_t *recv_bytes, unsigned char **reply, uint64_t *reply_bytes,
                          const char *what)
{
	int inner = v->shape.rank > 1 ? v->shape.rank - 1 : 0;
	size_t hdr = (size_t)inner * 3 * sizeof(int64_t);
	dvar_sharded_sel sel[DVAR_MAX_RANK];
	uint64_t total = 0;
	unsigned char *out;
	int pass;

	*reply = NULL;
	/* Pass 0 checks and sizes, pass 1 copies. */
	for (pass = 0; pass < 2; pass++) {
		const unsigned char *p = recv;

		out = *reply;
		for (int w = 0; w < v->W; w++) {
			uint64_t k, ib;

			if (pass == 0)
				reply_bytes[w] = 0;
			if (recv_bytes[w] == 0)
				continue;
			if (recv_bytes[w] < hdr + 8 || (recv_bytes[w] - hdr) % 8 != 0)
				return dvar_error_set(DVAR_ECOMM,
				                      "%s: worker %d sent a malformed request (%llu bytes)",
				                      what, w, (unsigned long long)recv_bytes[w]);
			for (int d = 0; d < inner; d++) {
				sel[d].start = get64(p + (size_t)d * 24);
				sel[d].step = get64(p + (size_t)d * 24 + 8);
				sel[d].count = get64(p + (size_t)d * 24 + 16);
			}
			if (pass == 0 && !check_sel(v, sel))
				return dvar_error_set(DVAR_ECOMM,
				                      "%s: worker %d sent a selection outside the variable's "
				                      "shape",
				                      what, w);
			k = (recv_bytes[w] - hdr) / 8;
			ib = selected_elems(v, sel) * v->esize;
			for (uint64_t j = 0; j < k; j++) {
				int64_t r = get64(p + hdr + j * 8), i;

				if (pass == 0) {
					if (r < 0 || r >= v->rows ||
					    dvar_sharded_owner(v, shard_of(v, r)) != v->worker)
						return dvar_error_set(DVAR_ECOMM,
						                      "%s: worker %d asked worker %d for row %lld, "
						                      "which it does not hold",
						                      what, w, v->worker, (long long)r);
					continue;
				}
				i = shard_of(v, r);
				extract(v, row_at(v, i, r), inner ? sel : NULL, out);
				out += ib;
			}
			if (pass == 0) {
				reply_bytes[w] = k * ib;
				total += k * ib;
			}
			p += recv_bytes[w];
		}
		if (pass == 0 && (uint64_t)(size_t)total != total)
			return dvar_error_set(DVAR_ENOMEM, "%s: %llu bytes to send", what,
			                      (unsigned long long)total);
		if (pass == 0 && !(*reply = malloc(total ? (size_t)total : 1)))
			return dvar_error_set(DVAR_ENOMEM, "%s: out of memory for %llu bytes", what,
			                      (unsigned long long)total);
	}
	return DVAR_OK;
}

/*
 * One all-to-all to the owners of rows: item i (the row number rows[i],
 * then item_bytes from items + i * item_bytes) goes to the worker that
 * holds row rows[i]. Each owner's part is hdr_bytes of hdr and then its
 * items, in the order of rows; a worker sent no item gets an empty part
 * (no header). On success count[o] (W entries) is how many items went to
 * worker o, and *recv and recv_bytes are dvar_strategy_all_to_all's: what
 * every worker sent this one, packed in worker order. local_rc != DVAR_OK
 * joins the step and fails it on every worker (count, recv_bytes may then
 * be NULL). Shared by the row fetch (requests) and row updates.
 */
static int send_to_owners(dvar_sharded_variable *v, int local_rc, const void *hdr,
                          size_t hdr_bytes, const int64_t *rows, size_t m, const void *items,
                          size_t item_bytes, uint64_t *count, void **recv, uint64_t *recv_bytes,
                          const char *step)
{
	int W = v->W, rc = local_rc;
	uint64_t *sizes = NULL, *pos, total = 0, each = 8 + (uint64_t)item_bytes;
	unsigned char *send = NULL;

	if (rc == DVAR_OK && !(sizes = calloc(2 * (size_t)W, sizeof *sizes)))
		rc = dvar_error_set(DVAR_ENOMEM, "%s: out of memory", step);
	if (rc == DVAR_OK) {
		pos = sizes + W;
		memset(count, 0, (size_t)W * sizeof *count);
		for (size_t i = 0; i < m; i++)
			count[dvar_sharded_owner(v, shard_of(v, rows[i]))]++;
		for (int o = 0; o < W; o++) {
			sizes[o] = count[o] ? hdr_bytes + each * count[o] : 0;
			pos[o] = total;
			total += sizes[o];
		}
		if ((uint64_t)(size_t)total != total || !(send = malloc(total ? (size_t)total : 1))) {
			rc = dvar_error_set(DVAR_ENOMEM, "%s: out of memory for %llu bytes", step,
			                    (unsigned long long)total);
		} else {
			for (int o = 0; o < W; o++) {
				if (!count[o] || hdr_bytes == 0)
					continue;
				memcpy(send + pos[o], hdr, hdr_bytes);
				pos[o] += hdr_bytes;
			}
			for (size_t i = 0; i < m; i++) {
				int o = dvar_sharded_owner(v, shard_of(v, rows[i]));

				put64(send + pos[o], rows[i]);
				if (item_bytes)
					memcpy(send + pos[o] + 8, (const unsigned char *)items + i * item_bytes,
					       item_bytes);
				pos[o] += each;
			}
		}
	}
	rc = dvar_strategy_all_to_all(v->s, rc, send, sizes, recv, recv_bytes, step);
	free(send);
	free(sizes);
	return rc;
}

int dvar_sharded_fetch(dvar_sharded_variable *v, int local_rc, const int64_t *rows, size_t m,
                        const dvar_sharded_sel *sel, void *dst, const char *what)
{
	int W = v->W, inner = v->shape.rank > 1 ? v->shape.rank - 1 : 0;
	size_t hdr = (size_t)inner * 3 * sizeof(int64_t);
	uint64_t ib = selected_elems(v, sel) * v->esize;
	uint64_t *sizes = NULL; /* W each: requests received, reply, replies received, count */
	dvar_sharded_sel full[DVAR_MAX_RANK];
	unsigned char hdrbuf[DVAR_MAX_RANK * 3 * sizeof(int64_t)];
	unsigned char *reply = NULL;
	void *recv = NULL;
	char step[DVAR_ERROR_MESSAGE_MAX];
	int rc = local_rc;

	if (W == 1) {
		/* Every shard is here: no exchange. */
		if (rc != DVAR_OK || ib == 0)
			return rc;
		for (size_t i = 0; i < m; i++)
			extract(v, row_at(v, shard_of(v, rows[i]), rows[i]), sel,
			        (unsigned char *)dst + i * ib);
		return DVAR_OK;
	}

	/* Requests always carry a selection: whole rows when sel is NULL. */
	if (!sel) {
		for (int d = 1; d < v->shape.rank; d++) {
			full[d - 1].start = 0;
			full[d - 1].step = 1;
			full[d - 1].count = v->shape.dims[d];
		}
		sel = full;
	}
	for (int d = 0; d < inner; d++) {
		put64(hdrbuf + (size_t)d * 24, sel[d].start);
		put64(hdrbuf + (size_t)d * 24 + 8, sel[d].step);
		put64(hdrbuf + (size_t)d * 24 + 16, sel[d].count);
	}
	if (rc == DVAR_OK && !(sizes = calloc(4 * (size_t)W, sizeof *sizes)))
		rc = dvar_error_set(DVAR_ENOMEM, "%s: out of memory", what);
	snprintf(step, sizeof step, "%s (requests)", what);
	rc = send_to_owners(v, rc, hdrbuf, hdr, rows, m, NULL, 0, sizes ? sizes + 3 * W : NULL, &recv,
	                    sizes, step);
	if (rc != DVAR_OK)
		goto done;

	rc = serve_requests(v, recv, sizes, &reply, sizes + W, what);
	free(recv);
	recv = NULL;
	snprintf(step, sizeof step, "%s (rows)", what);
	rc = dvar_strategy_all_to_all(v->s, rc, reply, sizes + W, &recv, sizes + 2 * W, step);
	if (rc != DVAR_OK)
		goto done;

	/* Back in the order asked: each owner answered its rows in that order. */
	{
		uint64_t *count = sizes + 3 * W, *cursor = sizes + W, at = 0;

		for (int o = 0; o < W; o++) {
			if (sizes[2 * W + o] != count[o] * ib) {
				rc = dvar_error_set(DVAR_ECOMM,
				                    "%s: worker %d sent %llu bytes of rows, %llu were asked for",
				                    what, o, (unsigned long long)sizes[2 * W + o],
				                    (unsigned long long)(count[o] * ib));
				goto done;
			}
			cursor[o] = at;
			at += sizes[2 * W + o];
		}
		for (size_t i = 0; i < m && ib > 0; i++) {
			int o = dvar_sharded_owner(v, shard_of(v, rows[i]));

			memcpy((unsigned char *)dst + i * ib, (unsigned char *)recv + cursor[o], (size_t)ib);
			cursor[o] += ib;
		}
	}
done:
	free(reply);
	free(recv);
	free(sizes);
	return rc;
}

/* ---------------------------------------------------------------- creation */

/* What every worker must agree on; plain bytes, zero-padded. */
typedef struct {
	int32_t dtype;
	int32_t rank;
	int64_t dims[DVAR_MAX_RANK];
	int32_t init_mode; /* 0 zeros, 1 initial_value, 2 init */
	uint32_t name_len;
	char partitioner[96];
	char name[NAME_MAX_BYTES + 1];
} spec_record;

static const char *const init_modes[] = { "neither initial_value nor init (zeros)",
	                                  "an initial_value", "an init function" };

static void describe_spec(const dvar_sharded_variable_spec *spec, spec_record *rec)
{
	memset(rec, 0, sizeof *rec);
	rec->dtype = spec->dtype;
	rec->rank = spec->shape.rank;
	for (int d = 0; d < DVAR_MAX_RANK; d++)
		rec->dims[d] = d < spec->shape.rank ? spec->shape.dims[d] : 0;
	rec->init_mode = spec->initial_value ? 1 : spec->init ? 2 : 0;
	if (spec->partitioner)
		dvar_partitioner_format(spec->partitioner, rec->partitioner, sizeof rec->partitioner);
	if (spec->name) {
		rec->name_len = (uint32_t)strnlen(spec->name, NAME_MAX_BYTES);
		memcpy(rec->name, spec->name, rec->name_len);
	}
}

static void format_record_shape(const spec_record *rec, char *buf, size_t cap)
{
	dvar_shape shape;

	memset(&shape, 0, sizeof shape);
	shape.rank = rec->rank >= 0 && rec->rank <= DVAR_MAX_RANK ? rec->rank : 0;
	memcpy(shape.dims, rec->dims, sizeof shape.dims);
	dvar_shape_format(&shape, buf, cap);
}

static const char *dtype_text(int dtype)
{
	const char *name = dvar_dtype_name(dtype);

	return name ? name : "an unknown dtype";
}

/* The first difference between worker 0's spec and another's, the same text
 * on every worker. */
static int compare_specs(const spec_record *recs, int W)
{
	const spec_record *a = &recs[0];
	const char *name = a->name;

	for (int w = 1; w < W; w++) {
		const spec_record *b = &recs[w];
		char sa[SHAPE_TEXT_MAX], sb[SHAPE_TEXT_MAX];

		if (a->name_len != b->name_len || memcmp(a->name, b->name, a->name_len) != 0)
			return dvar_error_set(DVAR_EINVAL,
			                      "creating sharded variable '%s': worker %d names it '%s' but "
			                      "worker 0 names it '%s': every worker must pass the same spec",
			                      name, w, b->name, a->name);
		if (a->dtype != b->dtype)
			return dvar_error_set(DVAR_EINVAL,
			                      "creating sharded variable '%s': worker %d passes dtype %s but "
			                      "worker 0 passes %s: every worker must pass the same spec",
			                      name, w, dtype_text(b->dtype), dtype_text(a->dtype));
		if (a->rank != b->rank || memcmp(a->dims, b->dims, sizeof a->dims) != 0) {
			format_record_shape(a, sa, sizeof sa);
			format_record_shape(b, sb, sizeof sb);
			return dvar_error_set(DVAR_EINVAL,
			                      "creating sharded variable '%s': worker %d passes shape %s but "
			                      "worker 0 passes %s: every worker must pass the same spec",
			                      name, w, sb, sa);
		}
		if (strcmp(a->partitioner, b->partitioner) != 0)
			return dvar_error_set(DVAR_EINVAL,
			                      "creating sharded variable '%s': worker %d passes partitioner "
			                      "%s but worker 0 passes %s: every worker must pass the same "
			                      "spec",
			                      name, w, b->partitioner, a->partitioner);
		if (a->init_mode != b->init_mode)
			return dvar_error_set(DVAR_EINVAL,
			                      "creating sharded variable '%s': worker %d passes %s but worker "
			                      "0 passes %s: every worker must pass the same spec",
			                      name, w, init_modes[b->init_mode % 3],
			                      init_modes[a->init_mode % 3]);
	}
	return DVAR_OK;
}

/* Everything about the spec this worker can check alone; fills v's layout. */
static int check_spec(dvar_sharded_variable *v, const dvar_sharded_variable_spec *spec)
{
	uint64_t nbytes = 0;
	int64_t num = 0, cap;
	const char *name;

	if (dvar_check_version("dvar_sharded_variable_spec", spec->version,
	                       DVAR_SHARDED_VARIABLE_SPEC_VERSION))
		return DVAR_EINVAL;
	name = spec->name;
	if (!name || name[0] == '\0' || strnlen(name, NAME_MAX_BYTES + 1) > NAME_MAX_BYTES)
		return dvar_error_set(DVAR_EINVAL, "sharded variable name must be 1 to %d bytes",
		                      NAME_MAX_BYTES);
	if (dvar_dtype_size(spec->dtype) == 0)
		return dvar_error_set(DVAR_EINVAL, "sharded variable '%s': unknown dtype %d", name,
		                      spec->dtype);
	if (dvar_shape_init(&v->shape, spec->shape.rank, spec->shape.dims) != DVAR_OK ||
	    dvar_shape_num_bytes(&v->shape, spec->dtype, &nbytes) != DVAR_OK)
		return dvar_error_prefix("sharded variable '%s'", name);
	if ((uint64_t)(size_t)nbytes != nbytes)
		return dvar_error_set(DVAR_EINVAL, "sharded variable '%s': too large for this machine",
		                      name);
	if (!spec->partitioner)
		return dvar_error_set(DVAR_EINVAL,
		                      "sharded variable '%s': a partitioner is required (it says how "
		                      "many shards to make)",
		                      name);
	if (dvar_partitioner_apply(spec->partitioner, &v->shape, spec->dtype, &num) != DVAR_OK)
		return dvar_error_prefix("sharded variable '%s'", name);

	v->dtype = spec->dtype;
	v->esize = dvar_dtype_size(spec->dtype);
	v->row_elems = 1;
	for (int d = 1; d < v->shape.rank; d++)
		v->row_elems *= (uint64_t)v->shape.dims[d];
	v->row_bytes = (size_t)v->row_elems * v->esize;
	if (v->shape.rank == 0 || num <= 1) {
		/* TF makes a plain variable: one shard, on worker 0. */
		num = 1;
	}
	v->rows = v->shape.rank == 0 ? 1 : v->shape.dims[0];
	cap = v->rows > 0 ? v->rows : 1; /* the div layout never has more shards than rows */
	if (v->shape.rank == 0 || num < cap)
		cap = v->shape.rank == 0 ? 1 : num;
	if (!(v->offsets = calloc((size_t)cap + 1, sizeof *v->offsets)))
		return dvar_error_set(DVAR_ENOMEM, "sharded variable '%s': out of memory for %lld shards",
		                      name, (long long)cap);
	if (v->shape.rank == 0) {
		v->n = 1; /* offsets { 0, 0 }: no axis 0 */
	} else if (dvar_div_layout(v->rows, num, v->offsets, &v->n) != DVAR_OK) {
		return dvar_error_prefix("sharded variable '%s'", name);
	}
	return DVAR_OK;
}

/* Names, and this worker's shards filled with the initial value. */
static int fill_shards(dvar_sharded_variable *v, const dvar_sharded_variable_spec *spec)
{
	size_t len = strlen(v->name), each = len + 32;
	char *block;

	v->names = calloc((size_t)v->n, sizeof *v->names);
	v->data = calloc((size_t)v->n, sizeof *v->data);
	block = malloc((size_t)v->n * each);
	if (!v->names || !v->data || !block) {
		free(block);
		return dvar_error_set(DVAR_ENOMEM, "sharded variable '%s': out of memory", v->name);
	}
	for (int64_t i = 0; i < v->n; i++) {
		v->names[i] = block + (size_t)i * each;
		snprintf(v->names[i], each, "%s/part_%lld", v->name, (long long)i);
	}
	for (int64_t i = 0; i < v->n; i++) {
		size_t bytes = shard_bytes(v, i);
		dvar_shape pshape = v->shape;
		int64_t poffset[DVAR_MAX_RANK] = { 0 };
		int rc;

		if (dvar_sharded_owner(v, i) != v->worker)
			continue;
		/* Zeros are the default; page-aligned so that a save writes it in place. */
		if (!(v->data[i] = dvar_page_alloc(bytes, 1)))
			return dvar_error_set(DVAR_ENOMEM,
			                      "sharded variable '%s': out of memory for shard '%s' (%zu "
			                      "bytes)",
			                      v->name, v->names[i], bytes);
		if (spec->initial_value) {
			if (bytes)
				memcpy(v->data[i], (const unsigned char *)spec->initial_value +
				                           shard_start_bytes(v, i),
				       bytes);
			continue;
		}
		if (!spec->init)
			continue;
		if (v->shape.rank > 0) {
			pshape.dims[0] = v->offsets[i + 1] - v->offsets[i];
			poffset[0] = v->offsets[i];
		}
		dvar_error_clear();
		rc = spec->init(spec->init_arg, v->dtype, &pshape, poffset, v->data[i]);
		if (rc == DVAR_OK)
			continue;
		if (rc > 0)
			rc = DVAR_ERROR;
		if (dvar_error_last()->message[0] == '\0')
			return dvar_error_set(rc, "sharded variable '%s': the initializer failed for shard "
			                          "'%s' (%s)",
			                      v->name, v->names[i], dvar_strerror(rc));
		return dvar_error_prefix("sharded variable '%s': the initializer failed for shard '%s'",
		                         v->name, v->names[i]);
	}
	return DVAR_OK;
}

int dvar_sharded_variable_spec_init(dvar_sharded_variable_spec *spec, unsigned int version)
{
	static const dvar_sharded_variable_spec init = DVAR_SHARDED_VARIABLE_SPEC_INIT;
	return dvar_options_init(spec, sizeof *spec, &init, "dvar_sharded_variable_spec", version,
	                         DVAR_SHARDED_VARIABLE_SPEC_VERSION);
}

int dvar_sharded_variable_create(dvar_sharded_variable **out, dvar_strategy *s,
                                 const dvar_sharded_variable_spec *spec)
{
	dvar_sharded_variable *v = NULL;
	spec_record *recs = NULL, *all = NULL;
	uint64_t *sizes = NULL;
	void *recv = NULL;
	char what[DVAR_ERROR_MESSAGE_MAX];
	int W, rc = DVAR_OK;

	if (out)
		*out = NULL;
	if (!s)
		return dvar_error_set(DVAR_EINVAL, "dvar_sharded_variable_create: strategy is NULL");
	W = dvar_strategy_num_workers(s);
	if (!out || !spec)
		rc = dvar_error_set(DVAR_EINVAL, "dvar_sharded_variable_create: %s is NULL",
		                    out ? "spec" : "out");
	else if (!(v = calloc(1, sizeof *v)))
		rc = dvar_error_set(DVAR_ENOMEM, "sharded variable: out of memory");
	if (rc == DVAR_OK) {
		v->s = s;
		v->W = W;
		v->worker = dvar_strategy_worker_id(s);
		rc = check_spec(v, spec);
	}
	if (rc == DVAR_OK && !(v->name = strdup(spec->name)))
		rc = dvar_error_set(DVAR_ENOMEM, "sharded variable '%s': out of memory", spec->name);

	/* Every worker's spec reaches every worker: the same one everywhere, or
	 * the first difference fails creation everywhere. */
	recs = calloc((size_t)W, sizeof *recs);
	sizes = calloc(2 * (size_t)W, sizeof *sizes);
	if (rc == DVAR_OK && (!recs || !sizes))
		rc = dvar_error_set(DVAR_ENOMEM, "sharded variable '%s': out of memory", spec->name);
	if (rc == DVAR_OK) {
		for (int w = 0; w < W; w++) {
			describe_spec(spec, &recs[w]);
			sizes[w] = sizeof *recs;
		}
	}
	rc = dvar_strategy_all_to_all(s, rc, recs, sizes, &recv, sizes ? sizes + W : NULL,
	                               "creating a sharded variable (its spec)");
	all = recv;
	if (rc == DVAR_OK) {
		for (int w = 0; w < W && rc == DVAR_OK; w++)
			if (sizes[W + w] != sizeof *recs)
				rc = dvar_error_set(DVAR_ECOMM,
				                    "creating sharded variable '%s': worker %d sent a spec of %llu "
				                    "bytes",
				                    v->name, w, (unsigned long long)sizes[W + w]);
		if (rc == DVAR_OK)
			rc = compare_specs(all, W);
	}
	free(recv);
	free(recs);
	free(sizes);
	if (rc != DVAR_OK) {
		dvar_sharded_variable_free(v);
		return rc;
	}

	/* Each owner fills its shards; a failure anywhere fails everywhere. */
	rc = dvar_track_init(&v->track, (uint64_t)v->rows);
	if (rc == DVAR_OK)
		rc = fill_shards(v, spec);
	snprintf(what, sizeof what, "creating sharded variable '%s' (its shards)", v->name);
	rc = dvar_strategy_agree(s, rc, what);
	if (rc != DVAR_OK) {
		dvar_sharded_variable_free(v);
		return rc;
	}
	*out = v;
	return DVAR_OK;
}

void dvar_sharded_variable_free(dvar_sharded_variable *v)
{
	if (!v)
		return;
	if (v->data)
		for (int64_t i = 0; i < v->n; i++)
			free(v->data[i]);
	free(v->data);
	if (v->names)
		free(v->names[0]);
	free(v->names);
	free(v->offsets);
	free(v->name);
	dvar_track_fini(&v->track);
	free(v);
}

dvar_track *dvar_sharded_variable_track(dvar_sharded_variable *v)
{
	return &v->track;
}

/* ---------------------------------------------------------------- accessors */

const char *dvar_sharded_variable_name(const dvar_sharded_variable *v)
{
	return v ? v->name : NULL;
}

int dvar_sharded_variable_dtype(const dvar_sharded_variable *v)
{
	return v ? v->dtype : 0;
}

const dvar_shape *dvar_sharded_variable_shape(const dvar_sharded_variable *v)
{
	return v ? &v->shape : NULL;
}

dvar_strategy *dvar_sharded_variable_strategy(const dvar_sharded_variable *v)
{
	return v ? v->s : NULL;
}

int64_t dvar_sharded_variable_num_shards(const dvar_sharded_variable *v)
{
	return v ? v->n : 0;
}

const int64_t *dvar_sharded_variable_offsets(const dvar_sharded_variable *v)
{
	return v ? v->offsets : NULL;
}

int dvar_sharded_variable_shard(const dvar_sharded_variable *v, int64_t i, dvar_shard_info *out)
{
	if (!v || !out)
		return dvar_error_set(DVAR_EINVAL, "dvar_sharded_variable_shard: %s is NULL",
		                      v ? "out" : "variable");
	if (i < 0 || i >= v->n)
		return dvar_error_set(DVAR_EINVAL,
		                      "sharded variable '%s': shard %lld does not exist (it has %lld)",
		                      v->name, (long long)i, (long long)v->n);
	memset(out, 0, sizeof *out);
	out->name = v->names[i];
	out->offset = v->offsets[i];
	out->shape = v->shape;
	if (v->shape.rank > 0)
		out->shape.dims[0] = v->offsets[i + 1] - v->offsets[i];
	out->owner = dvar_sharded_owner(v, i);
	out->data = v->data[i];
	return DVAR_OK;
}

/* ---------------------------------------------------------------- reads */

enum { AXIS0_ALL, AXIS0_INT, AXIS0_SLICE, AXIS0_RANGE };

typedef struct {
	dvar_shape out;
	int axis0;
	int64_t row;      /* AXIS0_INT: the row */
	dvar_subscript slice; /* AXIS0_SLICE */
	dvar_sharded_sel range; /* AXIS0_RANGE */
	uint64_t nrows;   /* rows selected along axis 0 */
	dvar_sharded_sel sel[DVAR_MAX_RANK]; /* dimension d at sel[d - 1] */
} read_plan;

static int push_dim(const dvar_sharded_variable *v, read_plan *p, int64_t len)
{
	if (p->out.rank == DVAR_MAX_RANK)
		return dvar_error_set(DVAR_EINVAL,
		                      "sharded variable '%s': the result would have more than %d "
		                      "dimensions",
		                      v->name, DVAR_MAX_RANK);
	p->out.dims[p->out.rank++] = len;
	return DVAR_OK;
}

/* Dimension d taken whole. */
static int full_dim(const dvar_sharded_variable *v, read_plan *p, int d)
{
	if (d == 0) {
		p->axis0 = AXIS0_ALL;
		p->nrows = (uint64_t)v->rows;
		return push_dim(v, p, v->rows);
	}
	p->sel[d - 1].start = 0;
	p->sel[d - 1].step = 1;
	p->sel[d - 1].count = v->shape.dims[d];
	return push_dim(v, p, v->shape.dims[d]);
}

/* Python's slice.indices(dim) for a dimension other than 0: clamped. */
static void py_slice(int64_t dim, const dvar_subscript *it, dvar_sharded_sel *sel)
{
	int64_t step = it->has_step ? it->step : 1;
	int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? dim : dim - 1;
	int64_t start, stop;

	if (!it->has_start)
		start = step > 0 ? lo : hi;
	else if (it->start < 0)
		start = it->start + dim < lo ? lo : it->start + dim;
	else
		start = it->start > hi ? hi : it->start;
	if (!it->has_stop)
		stop = step > 0 ? hi : lo;
	else if (it->stop < 0)
		stop = it->stop + dim < lo ? lo : it->stop + dim;
	else
		stop = it->stop > hi ? hi : it->stop;
	sel->start = start;
	sel->step = step;
	if (step > 0)
		sel->count = stop > start ? (int64_t)(((uint64_t)(stop - start) - 1) / (uint64_t)step + 1)
		                          : 0;
	else
		sel->count = start > stop ? (int64_t)(((uint64_t)(start - stop) - 1) /
		                                      ((uint64_t)0 - (uint64_t)step) + 1)
		                          : 0;
	if (sel->count == 0)
		sel->start = 0;
}

/*
 * ShardedVariable.__getitem__ over the whole variable: the item that takes
 * dimension 0 follows TF's ShardedVariable rules (an int counted from the
 * end and its error text; a slice normalized without clamping, as
 * _decompose_slice_spec does), every other dimension NumPy's (TF's tensor
 * indexing), '...' and newaxis anywhere. With one shard TF has made a plain
 * variable, so dimension 0 is indexed as the others are (a slice clamps).
 */
static int plan_read(const dvar_sharded_variable *v, const dvar_subscript *items, int n, read_plan *p)
{
	int rank = v->shape.rank, consumed = 0, ellipsis = 0, d = 0, rc;
	int plain = v->n == 1;

	memset(p, 0, sizeof *p);
	p->nrows = 1; /* a scalar's one row, or an int on axis 0 */
	if (n < 0 || (n > 0 && !items))
		return dvar_error_set(DVAR_EINVAL, "reading sharded variable '%s': %s", v->name,
		                      n < 0 ? "the item count is negative" : "items is NULL");
	for (int k = 0; k < n; k++) {
		switch (items[k].kind) {
		case DVAR_SUBSCRIPT_INT:
		case DVAR_SUBSCRIPT_SLICE:
			consumed++;
			break;
		case DVAR_SUBSCRIPT_NEWAXIS:
			break;
		case DVAR_SUBSCRIPT_ELLIPSIS:
			if (ellipsis++)
				return dvar_error_set(DVAR_EINVAL,
				                      "reading sharded variable '%s': Multiple ellipses in "
				                      "slice spec not allowed",
				                      v->name);
			break;
		default:
			return dvar_error_set(DVAR_EINVAL,
			                      "reading sharded variable '%s': item %d has unknown kind %d",
			                      v->name, k, items[k].kind);
		}
	}
	if (consumed > rank)
		return dvar_error_set(DVAR_EINVAL,
		                      "reading sharded variable '%s': Index out of range using input dim "
		                      "%d; input has only %d dims",
		                      v->name, rank, rank);
	p->axis0 = AXIS0_ALL;
	p->nrows = rank == 0 ? 1 : (uint64_t)v->rows;
	for (int k = 0; k < n; k++) {
		const dvar_subscript *it = &items[k];

		switch (it->kind) {
		case DVAR_SUBSCRIPT_NEWAXIS:
			rc = push_dim(v, p, 1);
			break;
		case DVAR_SUBSCRIPT_ELLIPSIS:
			rc = DVAR_OK;
			for (int e = 0; e < rank - consumed && rc == DVAR_OK; e++, d++)
				rc = full_dim(v, p, d);
			break;
		case DVAR_SUBSCRIPT_INT: {
			int64_t dim = d == 0 ? v->rows : v->shape.dims[d];
			int64_t i = it->index < 0 ? it->index + dim : it->index;

			if (i < 0 || i >= dim)
				return dvar_error_set(DVAR_EINVAL,
				                      "reading sharded variable '%s': %sslice index %lld of "
				                      "dimension %d out of bounds.",
				                      v->name, d == 0 && !plain ? "ShardedVariable: " : "",
				                      (long long)i, d);
			if (d == 0) {
				p->axis0 = AXIS0_INT;
				p->row = i;
				p->nrows = 1;
			} else {
				p->sel[d - 1].start = i;
				p->sel[d - 1].step = 1;
				p->sel[d - 1].count = 1;
			}
			d++;
			rc = DVAR_OK;
			break;
		}
		case DVAR_SUBSCRIPT_SLICE:
			if (d == 0 && !plain) {
				int64_t count = 0;

				if (dvar_sharded_slice_rows(v->rows, it, NULL, 0, &count) != DVAR_OK)
					return dvar_error_prefix("reading sharded variable '%s'", v->name);
				p->axis0 = AXIS0_SLICE;
				p->slice = *it;
				p->nrows = (uint64_t)count;
				rc = push_dim(v, p, count);
			} else {
				if (it->has_step && it->step == 0)
					return dvar_error_set(DVAR_EINVAL,
					                      "reading sharded variable '%s': strides[%d] must be "
					                      "non-zero",
					                      v->name, k);
				if (d == 0) {
					py_slice(v->rows, it, &p->range);
					p->axis0 = AXIS0_RANGE;
					p->nrows = (uint64_t)p->range.count;
					rc = push_dim(v, p, p->range.count);
				} else {
					py_slice(v->shape.dims[d], it, &p->sel[d - 1]);
					rc = push_dim(v, p, p->sel[d - 1].count);
				}
			}
			d++;
			break;
		default:
			rc = DVAR_OK;
			break;
		}
		if (rc != DVAR_OK)
			return rc;
	}
	for (; d < rank; d++)
		if ((rc = full_dim(v, p, d)) != DVAR_OK)
			return rc;
	return DVAR_OK;
}

/* The rows a plan selects, in order (p->nrows of them). */
static int plan_rows(const dvar_sharded_variable *v, const read_plan *p, int64_t **rows)
{
	int64_t count = 0;

	*rows = malloc(p->nrows ? (size_t)p->nrows * sizeof **rows : 1);
	if (!*rows)
		return dvar_error_set(DVAR_ENOMEM,
		                      "reading sharded variable '%s': out of memory for %llu rows",
		                      v->name, (unsigned long long)p->nrows);
	if (v->shape.rank == 0) {
		(*rows)[0] = 0;
		return DVAR_OK;
	}
	switch (p->axis0) {
	case AXIS0_INT:
		(*rows)[0] = p->row;
		return DVAR_OK;
	case AXIS0_SLICE:
		if (dvar_sharded_slice_rows(v->rows, &p->slice, *rows, (int64_t)p->nrows, &count) !=
		    DVAR_OK)
			return dvar_error_prefix("reading sharded variable '%s'", v->name);
		return DVAR_OK;
	case AXIS0_RANGE:
		for (uint64_t i = 0; i < p->nrows; i++)
			(*rows)[i] = p->range.start + (int64_t)i * p->range.step;
		return DVAR_OK;
	default:
		for (uint64_t i = 0; i < p->nrows; i++)
			(*rows)[i] = (int64_t)i;
		return DVAR_OK;
	}
}

int dvar_sharded_variable_read(dvar_sharded_variable *v, const dvar_subscript *items, int n,
                               void *dst, size_t dst_bytes, dvar_shape *out_shape)
{
	read_plan p;
	int64_t *rows = NULL;
	uint64_t bytes = 0;
	size_t m = 0;
	char what[DVAR_ERROR_MESSAGE_MAX];
	int rc;

	if (!v)
		return dvar_error_set(DVAR_EINVAL, "dvar_sharded_variable_read: variable is NULL");
	rc = plan_read(v, items, n, &p);
	if (rc == DVAR_OK) {
		bytes = p.nrows * selected_elems(v, p.sel) * v->esize;
		if (out_shape)
			*out_shape = p.out;
		if (dst && dst_bytes < bytes) {
			char shape[SHAPE_TEXT_MAX];

			dvar_shape_format(&p.out, shape, sizeof shape);
			rc = dvar_error_set(DVAR_ESHAPE,
			                    "reading sharded variable '%s': dst holds %llu bytes, the result "
			                    "(%s %s) needs %llu",
			                    v->name, (unsigned long long)dst_bytes, dtype_text(v->dtype),
			                    shape, (unsigned long long)bytes);
		}
	}
	/* dst NULL asks for the shape only: this worker takes no rows, but it
	 * still serves the others. */
	if (rc == DVAR_OK && dst && bytes > 0) {
		rc = plan_rows(v, &p, &rows);
		m = (size_t)p.nrows;
	}
	snprintf(what, sizeof what, "reading sharded variable '%s'", v->name);
	rc = dvar_sharded_fetch(v, rc, rows, m, v->shape.rank > 1 ? p.sel : NULL, dst, what);
	free(rows);
	return rc;
}

/* ---------------------------------------------------------------- updates */

static int update(dvar_sharded_variable *v, const void *value, int kind)
{
	char what[DVAR_ERROR_MESSAGE_MAX];
	int rc = DVAR_OK;

	if (!v)
		return dvar_error_set(DVAR_EINVAL, "sharded %s: variable is NULL", update_names[kind]);
	snprintf(what, sizeof what, "%s of sharded variable '%s'", update_names[kind], v->name);
	if (!value && v->rows > 0 && v->row_bytes > 0)
		rc = dvar_error_set(DVAR_EINVAL, "%s: %s is NULL", what,
		                    kind == UPDATE_ASSIGN ? "value" : "delta");
	else if (kind != UPDATE_ASSIGN)
		rc = dvar_kernel_check(v->dtype, kind == UPDATE_ADD ? DVAR_KOP_ADD : DVAR_KOP_SUB, what);
	/* All or nothing: no owner applies its rows unless every worker can. */
	rc = dvar_strategy_agree(v->s, rc, what);
	if (rc != DVAR_OK)
		return rc;
	dvar_track_all(&v->track);
	for (int64_t i = 0; i < v->n; i++) {
		size_t bytes = shard_bytes(v, i);
		const unsigned char *src;

		if (dvar_sharded_owner(v, i) != v->worker || bytes == 0)
			continue;
		/* TF: array_ops.slice(value, offsets[i], shard shape). */
		src = (const unsigned char *)value + shard_start_bytes(v, i);
		if (kind == UPDATE_ASSIGN)
			memcpy(v->data[i], src, bytes);
		else
			dvar_kernel_apply(v->dtype, kind == UPDATE_ADD ? DVAR_KOP_ADD : DVAR_KOP_SUB,
			                  v->data[i], src, bytes / v->esize);
	}
	return DVAR_OK;
}

int dvar_sharded_variable_assign(dvar_sharded_variable *v, const void *value)
{
	return update(v, value, UPDATE_ASSIGN);
}

int dvar_sharded_variable_assign_add(dvar_sharded_variable *v, const void *delta)
{
	return update(v, delta, UPDATE_ADD);
}

int dvar_sharded_variable_assign_sub(dvar_sharded_variable *v, const void *delta)
{
	return update(v, delta, UPDATE_SUB);
}

/* ---------------------------------------------------------------- row updates */

/* Everything about a scatter this worker can check alone, in TF's order:
 * the layout first (_decompose_indices), then the op, then the arguments. */
static int check_scatter(const dvar_sharded_variable *v, dvar_scatter_op op,
                         const int64_t *indices, size_t count, const void *rows,
                         size_t rows_bytes, const char *what)
{
	uint64_t need;
	int rc;

	if (v->shape.rank == 0)
		return dvar_error_set(DVAR_EINVAL, "%s: a scalar has no rows to scatter into", what);
	if (!dvar_div_layout_is(v->offsets, v->n))
		return dvar_error_set(DVAR_ENOTSUPP,
		                      "%s: scatter_xxx ops are not supported in ShardedVariable that "
		                      "does not conform to \"div\" sharding",
		                      what);
	if ((rc = dvar_variable_scatter_check(v->dtype, op, what)) != DVAR_OK)
		return rc;
	if (count > 0 && !indices)
		return dvar_error_set(DVAR_EINVAL, "%s: indices is NULL", what);
	need = (uint64_t)count * v->row_bytes;
	if (count > 0 && v->row_bytes > 0 && need / v->row_bytes != count)
		return dvar_error_set(DVAR_EINVAL, "%s: %zu indices are too many", what, count);
	if (need > 0 && !rows)
		return dvar_error_set(DVAR_EINVAL, "%s: rows is NULL", what);
	if (rows_bytes != need)
		return dvar_error_set(DVAR_ESHAPE,
		                      "%s: rows holds %llu bytes, %zu rows of %zu bytes need %llu", what,
		                      (unsigned long long)rows_bytes, count, v->row_bytes,
		                      (unsigned long long)need);
	for (size_t k = 0; k < count; k++)
		if (indices[k] < 0 || indices[k] >= v->rows)
			return dvar_error_set(DVAR_EINVAL,
			                      "%s: index %lld at position %zu is outside [0, %lld)", what,
			                      (long long)indices[k], k, (long long)v->rows);
	return DVAR_OK;
}

/*
 * The owner's side: the updates every worker sent (recv, packed in worker
 * order; each an 8-byte row number and a row), applied in worker order and
 * then in each worker's order. Checked whole before any row changes.
 */
static int apply_updates(dvar_sharded_variable *v, dvar_scatter_op op, const unsigned char *recv,
                         const uint64_t *recv_bytes, const char *what)
{
	uint64_t each = 8 + (uint64_t)v->row_bytes;

	for (int pass = 0; pass < 2; pass++) {
		const unsigned char *p = recv;

		for (int w = 0; w < v->W; w++) {
			uint64_t k = recv_bytes[w] / each;

			if (pass == 0 && recv_bytes[w] % each != 0)
				return dvar_error_set(DVAR_ECOMM,
				                      "%s: worker %d sent malformed updates (%llu bytes)", what,
				                      w, (unsigned long long)recv_bytes[w]);
			for (uint64_t j = 0; j < k; j++) {
				const unsigned char *item = p + j * each;
				int64_t r = get64(item), i;

				if (pass == 0) {
					if (r < 0 || r >= v->rows ||
					    dvar_sharded_owner(v, shard_of(v, r)) != v->worker)
						return dvar_error_set(DVAR_ECOMM,
						                      "%s: worker %d sent worker %d an update of "
						                      "row %lld, which it does not hold",
						                      what, w, v->worker, (long long)r);
					continue;
				}
				i = shard_of(v, r);
				dvar_track_rows(&v->track, &r, 1);
				r -= v->offsets[i];
				dvar_variable_scatter_rows(v->dtype, op, v->data[i], (size_t)v->row_elems, &r,
				                            1, item + 8);
			}
			p += recv_bytes[w];
		}
	}
	return DVAR_OK;
}

int dvar_sharded_variable_scatter(dvar_sharded_variable *v, dvar_scatter_op op,
                                  const int64_t *indices, size_t count, const void *rows,
                                  size_t rows_bytes)
{
	const char *name = dvar_variable_scatter_name(op);
	char what[DVAR_ERROR_MESSAGE_MAX];
	uint64_t *sizes = NULL; /* W each: received, sent per owner */
	void *recv = NULL;
	int rc;

	if (!v)
		return dvar_error_set(DVAR_EINVAL, "dvar_sharded_variable_scatter: variable is NULL");
	snprintf(what, sizeof what, "%s of sharded variable '%s'",
	         strcmp(name, "?") ? name : "scatter", v->name);
	rc = check_scatter(v, op, indices, count, rows, rows_bytes, what);
	if (rc == DVAR_OK && !(sizes = calloc(2 * (size_t)v->W, sizeof *sizes)))
		rc = dvar_error_set(DVAR_ENOMEM, "%s: out of memory", what);
	/* Nothing changes anywhere unless every worker's checks passed. */
	rc = send_to_owners(v, rc, NULL, 0, indices, rc == DVAR_OK ? count : 0, rows, v->row_bytes,
	                    sizes ? sizes + v->W : NULL, &recv, sizes, what);
	if (rc == DVAR_OK)
		rc = apply_updates(v, op, recv, sizes, what);
	free(recv);
	free(sizes);
	return rc;
}
