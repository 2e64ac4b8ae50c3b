/*
 * restore/diff.c - dvar_diff: compare two checkpoints. Variables are
 * matched by name (or TF2 short name); a pair that agrees on dtype and
 * shape has its values read in bounded pieces from both sides at once and
 * compared element by element (string tensors read whole, byte for byte),
 * then its attributes are walked in key order. The report keeps copies of
 * what it names: the readers are closed when the call returns.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "restore/restore.h"

/* The buffers of one piece by default. They take 2 * (size + 8) bytes an
 * element, of which 2 * size are read: a piece then reads at most
 * DVAR_PIECE_BYTES of both sides, the progress step of the other operations. */
#define DIFF_PIECE_BYTES (2 * (uint64_t)DVAR_PIECE_BYTES)

/* An attribute whose values differ; NULL for a side without it. */
typedef struct {
	char *key, *a, *b;
} attr_diff;

/* One variable both sides hold: what dvar_var_diff shows, owned. */
typedef struct {
	char *name;
	dvar_diff_status status;
	int dtype[2];
	dvar_shape shape[2];
	uint64_t num_elements, num_different;
	double max_abs;
	int has_first;
	uint64_t first_index;
	char *first[2]; /* the first differing element's bytes on each side */
	size_t first_len[2];
	attr_diff *attrs;
	size_t num_attrs, cap_attrs;
} var_diff;

struct dvar_diff_report {
	char *path[2];
	char **only[2];
	size_t num_only[2], cap_only[2];
	size_t excluded;
	var_diff *vars;
	size_t num_vars, cap_vars;
};

/* A variable by the key it is matched by. */
typedef struct {
	const char *key;
	size_t i;
} keyed;

/* One side's variables: their keys, which are left out, the rest sorted. */
typedef struct {
	dvar_reader *r;
	size_t n;
	char **key;         /* name or short name of each variable */
	unsigned char *out; /* out[i]: variable i is left out */
	keyed *sorted;      /* the variables not left out, by key */
	size_t live;
} side;

typedef struct {
	const dvar_diff_options *o;
	int tolerance;     /* atol or rtol given */
	double atol, rtol; /* 0 where not given */
	side s[2];
	dvar_op op;
	dvar_diff_report *rep;
} differ;

/* ------------------------------------------------------------- options */

int dvar_diff_options_init(dvar_diff_options *opts, unsigned int version)
{
	static const dvar_diff_options init = DVAR_DIFF_OPTIONS_INIT;
	return dvar_options_init(opts, sizeof *opts, &init, "dvar_diff_options", version,
	                         DVAR_DIFF_OPTIONS_VERSION);
}

static int check_options(const dvar_diff_options *o)
{
	int rc = dvar_check_version("dvar_diff_options", o->version, DVAR_DIFF_OPTIONS_VERSION);

	if (rc != DVAR_OK)
		return rc;
	if (!isfinite(o->atol) || !isfinite(o->rtol))
		return dvar_error_set(DVAR_EINVAL, "dvar_diff: atol and rtol must be finite numbers "
		                                   "(below 0: not given)");
	if ((o->flags & DVAR_DIFF_BITWISE) && (o->atol >= 0 || o->rtol >= 0))
		return dvar_error_set(DVAR_EINVAL, "dvar_diff: a bitwise comparison wants equal bytes: "
		                                   "it cannot go with a tolerance (atol, rtol)");
	if (o->num_exclude_prefixes && !o->exclude_prefixes)
		return dvar_error_set(DVAR_EINVAL, "dvar_diff: exclude_prefixes is NULL");
	for (size_t k = 0; k < o->num_exclude_prefixes; k++)
		if (!o->exclude_prefixes[k])
			return dvar_error_set(DVAR_EINVAL, "dvar_diff: exclude_prefixes[%zu] is NULL", k);
	return DVAR_OK;
}

/* --------------------------------------------------------------- names */

static int starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* 1 when variable v, matched by key, is left out of the comparison. */
static int left_out(const dvar_diff_options *o, const dvar_var_info *v, const char *key)
{
	for (size_t k = 0; k < o->num_exclude_prefixes; k++)
		if (starts_with(v->name, o->exclude_prefixes[k]) ||
		    starts_with(key, o->exclude_prefixes[k]))
			return 1;
	/* What TensorFlow saves beside the variables: no conversion carries it all. */
	return (o->flags & DVAR_DIFF_SKIP_TF_BOOKKEEPING) &&
	       (strcmp(v->name, "_CHECKPOINTABLE_OBJECT_GRAPH") == 0 ||
	        strcmp(v->name, "save_counter") == 0 || starts_with(v->name, "save_counter/") ||
	        v->dtype == DVAR_DTYPE_STRING);
}

static int by_key(const void *x, const void *y)
{
	return strcmp(((const keyed *)x)->key, ((const keyed *)y)->key);
}

static void side_free(side *sd)
{
	for (size_t i = 0; sd->key && i < sd->n; i++)
		free(sd->key[i]);
	free(sd->key);
	free(sd->out);
	free(sd->sorted);
	dvar_reader_free(sd->r);
}

static int side_open(side *sd, const char *path, const dvar_diff_options *o)
{
	dvar_read_options ro = DVAR_READ_OPTIONS_INIT;

	ro.threads = o->threads;
	return dvar_reader_open(&sd->r, path, &ro);
}

/* Key every variable of sd (side A or B, as label says), mark the ones
 * left out and sort the rest. */
static int side_key(side *sd, const char *label, const dvar_diff_options *o)
{
	dvar_var_info v;
	int rc;

	sd->n = dvar_reader_num_vars(sd->r);
	sd->key = calloc(sd->n + 1, sizeof(char *));
	sd->out = calloc(sd->n + 1, 1);
	sd->sorted = calloc(sd->n + 1, sizeof(keyed));
	if (!sd->key || !sd->out || !sd->sorted)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t i = 0; i < sd->n; i++) {
		if ((rc = dvar_reader_var(sd->r, i, &v)) != DVAR_OK)
			return rc;
		sd->key[i] = o->flags & DVAR_DIFF_SHORT_NAMES ? dvar_short_name(v.name) : strdup(v.name);
		if (!sd->key[i])
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		sd->out[i] = (unsigned char)left_out(o, &v, sd->key[i]);
		if (!sd->out[i])
			sd->sorted[sd->live++] = (keyed){ sd->key[i], i };
	}
	qsort(sd->sorted, sd->live, sizeof(keyed), by_key);
	for (size_t k = 1; k < sd->live; k++) {
		if (strcmp(sd->sorted[k - 1].key, sd->sorted[k].key) != 0)
			continue;
		dvar_var_info va, vb;
		dvar_reader_var(sd->r, sd->sorted[k - 1].i, &va);
		dvar_reader_var(sd->r, sd->sorted[k].i, &vb);
		return dvar_error_set(DVAR_EINVAL, "'%s' is the short name of both '%s' and '%s' in "
		                                   "%s (%s); compare without short names",
		                      sd->sorted[k].key, va.name, vb.name, label, dvar_reader_path(sd->r));
	}
	return DVAR_OK;
}

/* The variable of sd matched by key; SIZE_MAX when none. */
static size_t side_find(const side *sd, const char *key)
{
	keyed want = { key, 0 };
	const keyed *k = bsearch(&want, sd->sorted, sd->live, sizeof(keyed), by_key);

	return k ? k->i : SIZE_MAX;
}

/* -------------------------------------------------------------- report */

static void var_diff_free(var_diff *v)
{
	free(v->name);
	free(v->first[0]);
	free(v->first[1]);
	for (size_t k = 0; k < v->num_attrs; k++) {
		free(v->attrs[k].key);
		free(v->attrs[k].a);
		free(v->attrs[k].b);
	}
	free(v->attrs);
}

void dvar_diff_report_free(dvar_diff_report *rep)
{
	if (!rep)
		return;
	for (int s = 0; s < 2; s++) {
		free(rep->path[s]);
		for (size_t k = 0; k < rep->num_only[s]; k++)
			free(rep->only[s][k]);
		free(rep->only[s]);
	}
	for (size_t i = 0; i < rep->num_vars; i++)
		var_diff_free(&rep->vars[i]);
	free(rep->vars);
	free(rep);
}

/* A copy of s, or NULL when s is NULL; *failed is set when out of memory. */
static char *copy_or_null(const char *s, int *failed)
{
	char *c = s ? strdup(s) : NULL;

	if (s && !c)
		*failed = 1;
	return c;
}

/* Keep the first differing element: its index and both sides' bytes. */
static int set_first(var_diff *v, uint64_t at, const void *a, size_t la, const void *b,
                     size_t lb)
{
	v->has_first = 1;
	v->first_index = at;
	v->first_len[0] = la;
	v->first_len[1] = lb;
	v->first[0] = malloc(la + 1);
	v->first[1] = malloc(lb + 1);
	if (!v->first[0] || !v->first[1])
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	memcpy(v->first[0], a, la);
	memcpy(v->first[1], b, lb);
	return DVAR_OK;
}

/* Variables of side `from` that `other` lacks go in rep->only[from]; in_other[i]
 * (when given) is where variable i is in other, SIZE_MAX when nowhere. */
static int list_missing(differ *d, int from, size_t *in_other)
{
	const side *sd = &d->s[from], *other = &d->s[!from];
	dvar_diff_report *rep = d->rep;

	for (size_t i = 0; i < sd->n; i++) {
		size_t at = sd->out[i] ? SIZE_MAX : side_find(other, sd->key[i]);
		if (in_other)
			in_other[i] = at;
		if (sd->out[i] || at != SIZE_MAX)
			continue;
		char **grown = dvar_grow(rep->only[from], rep->num_only[from], &rep->cap_only[from],
		                         sizeof(char *), 16);
		if (!grown)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		rep->only[from] = grown;
		if (!(grown[rep->num_only[from]] = strdup(sd->key[i])))
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		rep->num_only[from]++;
	}
	return DVAR_OK;
}

/* -------------------------------------------------------------- values */

/* Buffers for one piece of each side, raw and as doubles. */
typedef struct {
	void *raw[2];
	double *f64[2];
} buffers;

static int is_float(int dtype)
{
	return dtype == DVAR_FLOAT32 || dtype == DVAR_FLOAT64 || dtype == DVAR_FLOAT16 ||
	       dtype == DVAR_BFLOAT16;
}

/* Elements x of A and y of B whose bytes differ: equal or not. */
static int elements_equal(const differ *d, int dtype, double x, double y)
{
	if (d->o->flags & DVAR_DIFF_BITWISE)
		return 0;
	if (isnan(x) && isnan(y))
		return 1;
	/* A NaN against a number is a difference whatever the tolerance. */
	if (d->tolerance)
		return fabs(x - y) <= d->atol + d->rtol * fabs(y);
	/* Bytes tell integers apart exactly; doubles would round above 2^53. */
	return is_float(dtype) && x == y;
}

/* Compare one piece of n elements, the base-th on of the variable. */
static int compare_piece(const differ *d, int dtype, const buffers *buf, uint64_t n,
                         uint64_t base, var_diff *v)
{
	size_t esize = dvar_dtype_size(dtype);
	const unsigned char *a = buf->raw[0], *b = buf->raw[1];
	int rc = DVAR_OK;

	if (memcmp(a, b, n * esize) == 0)
		return DVAR_OK;
	dvar_dtype_to_f64(buf->f64[0], dtype, a, n);
	dvar_dtype_to_f64(buf->f64[1], dtype, b, n);
	for (uint64_t k = 0; k < n && rc == DVAR_OK; k++) {
		if (memcmp(a + k * esize, b + k * esize, esize) == 0)
			continue;
		double x = buf->f64[0][k], y = buf->f64[1][k], diff = fabs(x - y);
		if (!isnan(diff) && diff > v->max_abs)
			v->max_abs = diff;
		if (elements_equal(d, dtype, x, y))
			continue;
		if (!v->has_first)
			rc = set_first(v, base + k, a + k * esize, esize, b + k * esize, esize);
		v->num_different++;
	}
	return rc;
}

/* Compare variable ia of A with ib of B (described by va), which agree on
 * dtype and shape, in pieces of both sides at once. */
static int compare_values(differ *d, size_t ia, size_t ib, const dvar_var_info *va,
                          var_diff *v)
{
	size_t esize = dvar_dtype_size(va->dtype);
	uint64_t bytes = d->o->piece_bytes ? d->o->piece_bytes : DIFF_PIECE_BYTES;
	uint64_t budget = bytes / (2 * esize + 2 * sizeof(double)), n, all, base = 0;
	dvar_slice full, piece;
	dvar_slice_walk w;
	buffers buf = { { NULL, NULL }, { NULL, NULL } };
	int rc = DVAR_OK;

	if (!budget)
		budget = 1;
	dvar_slice_full(&full, &va->shape);
	dvar_slice_num_elements(&full, &all);
	size_t cap = (size_t)(all < budget ? all : budget) + 1;
	for (int s = 0; s < 2; s++) {
		buf.raw[s] = malloc(cap * esize);
		buf.f64[s] = malloc(cap * sizeof(double));
		if (!buf.raw[s] || !buf.f64[s]) {
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory (a piece of '%s')", va->name);
			goto done;
		}
	}
	/* The pieces come in row-major order: base is the first one's flat index. */
	dvar_slice_walk_init(&w, &full, budget);
	while (dvar_slice_walk_next(&w, &piece, &n)) {
		if ((rc = dvar_op_check(&d->op, dvar_reader_path(d->s[0].r))) != DVAR_OK ||
		    (rc = dvar_reader_read(d->s[0].r, ia, &piece, buf.raw[0], n * esize)) != DVAR_OK ||
		    (rc = dvar_reader_read(d->s[1].r, ib, &piece, buf.raw[1], n * esize)) != DVAR_OK ||
		    (rc = compare_piece(d, va->dtype, &buf, n, base, v)) != DVAR_OK)
			break;
		base += n;
		dvar_op_advance(&d->op, 2 * n * esize);
	}
done:
	for (int s = 0; s < 2; s++) {
		free(buf.raw[s]);
		free(buf.f64[s]);
	}
	return rc;
}

/* Compare string tensors ia of A and ib of B (of va's shape, both), element by element. */
static int compare_strings(differ *d, size_t ia, size_t ib, const dvar_var_info *va, var_diff *v)
{
	uint64_t n, *la = NULL, *lb = NULL;
	char *ba = NULL, *bb = NULL;
	int rc;

	dvar_shape_num_elements(&va->shape, &n);
	if ((rc = dvar_op_check(&d->op, dvar_reader_path(d->s[0].r))) == DVAR_OK &&
	    (rc = dvar_reader_read_strings_alloc(d->s[0].r, ia, &la, &ba, NULL)) == DVAR_OK &&
	    (rc = dvar_reader_read_strings_alloc(d->s[1].r, ib, &lb, &bb, NULL)) == DVAR_OK) {
		for (uint64_t k = 0, oa = 0, ob = 0; k < n && rc == DVAR_OK;
		     oa += la[k], ob += lb[k], k++) {
			if (la[k] == lb[k] && memcmp(ba + oa, bb + ob, (size_t)la[k]) == 0)
				continue;
			if (!v->has_first)
				rc = set_first(v, k, ba + oa, (size_t)la[k], bb + ob, (size_t)lb[k]);
			v->num_different++;
		}
	}
	free(la);
	free(lb);
	free(ba);
	free(bb);
	return rc;
}

/* ---------------------------------------------------------- attributes */

/* A kind that only says how the variable is stored: none, plain or sharded. */
static int layout_kind(const char *kind)
{
	return !kind || strcmp(kind, DVAR_KIND_PLAIN) == 0 || strcmp(kind, DVAR_KIND_SHARDED) == 0;
}

static int add_attr(var_diff *v, const char *key, const char *a, const char *b)
{
	attr_diff *grown = dvar_grow(v->attrs, v->num_attrs, &v->cap_attrs, sizeof(*grown), 4);
	int failed = 0;

	if (!grown)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	v->attrs = grown;
	grown[v->num_attrs++] = (attr_diff){ copy_or_null(key, &failed), copy_or_null(a, &failed),
	                                     copy_or_null(b, &failed) };
	return failed ? dvar_error_set(DVAR_ENOMEM, "out of memory") : DVAR_OK;
}

/* Walk the attributes of variable ia of A and ib of B (each in key order)
 * together, keeping the keys whose values differ. */
static int compare_attrs(const differ *d, size_t ia, size_t ib, var_diff *v)
{
	const dvar_reader *ra = d->s[0].r, *rb = d->s[1].r;
	size_t na = dvar_reader_var_num_attrs(ra, ia), nb = dvar_reader_var_num_attrs(rb, ib);
	size_t ka = 0, kb = 0;
	int rc = DVAR_OK;

	/* A side without attributes (a TensorFlow checkpoint, a plain import) says nothing. */
	if (na == 0 || nb == 0)
		return DVAR_OK;
	while ((ka < na || kb < nb) && rc == DVAR_OK) {
		const char *key_a = NULL, *val_a = NULL, *key_b = NULL, *val_b = NULL;
		if (ka < na)
			dvar_reader_var_attr_at(ra, ia, ka, &key_a, &val_a);
		if (kb < nb)
			dvar_reader_var_attr_at(rb, ib, kb, &key_b, &val_b);
		int c = !key_a ? 1 : !key_b ? -1 : strcmp(key_a, key_b);
		const char *key = c <= 0 ? key_a : key_b;
		const char *x = c <= 0 ? val_a : NULL, *y = c >= 0 ? val_b : NULL;
		ka += c <= 0;
		kb += c >= 0;
		if (x && y && strcmp(x, y) == 0)
			continue;
		/* How rows are laid out over shards is storage, which reshard and export change. */
		if (strcmp(key, DVAR_SHARDING_ATTR_SHARDS) == 0 ||
		    strcmp(key, DVAR_SHARDING_ATTR_LAYOUT) == 0 ||
		    (strcmp(key, DVAR_STORE_ATTR_KIND) == 0 && layout_kind(x) && layout_kind(y)))
			continue;
		rc = add_attr(v, key, x, y);
	}
	return rc;
}

/* ----------------------------------------------------------- variables */

/* Classify variable ia of A against ib of B, comparing values where dtype
 * and shape agree, then attributes. */
static int compare_variable(differ *d, size_t ia, size_t ib, var_diff *v)
{
	dvar_var_info va, vb;
	int rc;

	if ((rc = dvar_reader_var(d->s[0].r, ia, &va)) != DVAR_OK ||
	    (rc = dvar_reader_var(d->s[1].r, ib, &vb)) != DVAR_OK)
		return rc;
	if (!(v->name = strdup(d->s[0].key[ia])))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	v->dtype[0] = va.dtype;
	v->dtype[1] = vb.dtype;
	v->shape[0] = va.shape;
	v->shape[1] = vb.shape;
	if (va.dtype != vb.dtype) {
		v->status = DVAR_DIFF_DTYPE_DIFFERS;
	} else if (!dvar_shape_equal(&va.shape, &vb.shape)) {
		v->status = DVAR_DIFF_SHAPE_DIFFERS;
	} else {
		dvar_shape_num_elements(&va.shape, &v->num_elements);
		if (va.dtype == DVAR_DTYPE_STRING) {
			rc = compare_strings(d, ia, ib, &va, v);
			dvar_op_advance(&d->op, va.raw_bytes + vb.raw_bytes);
		} else if (!dvar_dtype_size(va.dtype)) {
			rc = dvar_error_tf_dtype(va.name, va.dtype);
		} else {
			rc = compare_values(d, ia, ib, &va, v);
		}
		v->status = v->num_different ? DVAR_DIFF_VALUES_DIFFER : DVAR_DIFF_EQUAL;
	}
	if (rc == DVAR_OK && !(d->o->flags & DVAR_DIFF_NO_ATTRS))
		rc = compare_attrs(d, ia, ib, v);
	return rc;
}

/* Bytes both sides will read: what progress counts. */
static uint64_t bytes_to_compare(const differ *d, const size_t *in_b)
{
	dvar_var_info va, vb;
	uint64_t total = 0, n;

	for (size_t i = 0; i < d->s[0].n; i++) {
		if (in_b[i] == SIZE_MAX || dvar_reader_var(d->s[0].r, i, &va) != DVAR_OK ||
		    dvar_reader_var(d->s[1].r, in_b[i], &vb) != DVAR_OK)
			continue;
		if (va.dtype != vb.dtype || !dvar_shape_equal(&va.shape, &vb.shape))
			continue;
		if (va.dtype == DVAR_DTYPE_STRING)
			total += va.raw_bytes + vb.raw_bytes;
		else if (dvar_shape_num_bytes(&va.shape, va.dtype, &n) == DVAR_OK)
			total += 2 * n;
	}
	return total;
}

/* Compare every variable of A that B holds, in A's order, into the report. */
static int compare_all(differ *d, const size_t *in_b)
{
	dvar_diff_report *rep = d->rep;
	int rc = DVAR_OK;

	for (size_t i = 0; i < d->s[0].n && rc == DVAR_OK; i++) {
		if (in_b[i] == SIZE_MAX)
			continue;
		var_diff *grown = dvar_grow(rep->vars, rep->num_vars, &rep->cap_vars, sizeof(*grown), 16);
		if (!grown)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		rep->vars = grown;
		var_diff v = { 0 };
		/* A variable whose comparison failed is not part of the report. */
		if ((rc = compare_variable(d, i, in_b[i], &v)) == DVAR_OK)
			rep->vars[rep->num_vars++] = v;
		else
			var_diff_free(&v);
	}
	return rc;
}

int dvar_diff(dvar_diff_report **out, const char *a, const char *b, const dvar_diff_options *opts)
{
	static const dvar_diff_options defaults = DVAR_DIFF_OPTIONS_INIT;
	differ d;
	size_t *in_b = NULL;
	int rc, began = 0;

	if (out)
		*out = NULL;
	if (!out || !a || !b)
		return dvar_error_set(DVAR_EINVAL, "dvar_diff: out, a and b are required");
	memset(&d, 0, sizeof(d));
	d.o = opts ? opts : &defaults;
	if ((rc = check_options(d.o)) != DVAR_OK)
		return rc;
	d.tolerance = d.o->atol >= 0 || d.o->rtol >= 0;
	d.atol = d.o->atol < 0 ? 0 : d.o->atol;
	d.rtol = d.o->rtol < 0 ? 0 : d.o->rtol;
	if ((rc = side_open(&d.s[0], a, d.o)) != DVAR_OK ||
	    (rc = side_open(&d.s[1], b, d.o)) != DVAR_OK ||
	    (rc = side_key(&d.s[0], "A", d.o)) != DVAR_OK ||
	    (rc = side_key(&d.s[1], "B", d.o)) != DVAR_OK)
		goto done;
	d.rep = calloc(1, sizeof(*d.rep));
	in_b = malloc((d.s[0].n + 1) * sizeof(*in_b));
	if (!d.rep || !in_b || !(d.rep->path[0] = strdup(dvar_reader_path(d.s[0].r))) ||
	    !(d.rep->path[1] = strdup(dvar_reader_path(d.s[1].r)))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	d.rep->excluded = (d.s[0].n - d.s[0].live) + (d.s[1].n - d.s[1].live);
	if ((rc = list_missing(&d, DVAR_DIFF_A, in_b)) != DVAR_OK ||
	    (rc = list_missing(&d, DVAR_DIFF_B, NULL)) != DVAR_OK)
		goto done;
	began = 1;
	dvar_op_init(&d.op, &d.o->cb, bytes_to_compare(&d, in_b));
	rc = compare_all(&d, in_b);
done:
	free(in_b);
	side_free(&d.s[0]);
	side_free(&d.s[1]);
	if (rc != DVAR_OK && !began) {
		dvar_diff_report_free(d.rep);
		d.rep = NULL;
	}
	*out = d.rep;
	return rc;
}

/* ------------------------------------------------------------ accessors */

const char *dvar_diff_report_path(const dvar_diff_report *rep, dvar_diff_side side)
{
	return rep && (side == DVAR_DIFF_A || side == DVAR_DIFF_B) ? rep->path[side] : NULL;
}

size_t dvar_diff_report_num_excluded(const dvar_diff_report *rep)
{
	return rep ? rep->excluded : 0;
}

size_t dvar_diff_report_num_only_in(const dvar_diff_report *rep, dvar_diff_side side)
{
	return rep && (side == DVAR_DIFF_A || side == DVAR_DIFF_B) ? rep->num_only[side] : 0;
}

const char *dvar_diff_report_only_in(const dvar_diff_report *rep, dvar_diff_side side, size_t k)
{
	return k < dvar_diff_report_num_only_in(rep, side) ? rep->only[side][k] : NULL;
}

size_t dvar_diff_report_num_vars(const dvar_diff_report *rep)
{
	return rep ? rep->num_vars : 0;
}

int dvar_diff_report_var(const dvar_diff_report *rep, size_t i, dvar_var_diff *out)
{
	if (!out || i >= dvar_diff_report_num_vars(rep))
		return dvar_error_set(DVAR_EINVAL, "dvar_diff_report_var: %s", !out ? "out is NULL" :
		                      "variable index out of range");
	const var_diff *v = &rep->vars[i];
	*out = (dvar_var_diff){
		.name = v->name, .status = v->status, .dtype_a = v->dtype[0], .dtype_b = v->dtype[1],
		.shape_a = v->shape[0], .shape_b = v->shape[1], .num_elements = v->num_elements,
		.num_different = v->num_different, .max_abs_diff = v->max_abs,
		.has_first = v->has_first, .first_index = v->first_index, .first_a = v->first[0],
		.first_a_len = v->first_len[0], .first_b = v->first[1], .first_b_len = v->first_len[1],
		.num_attrs = v->num_attrs,
	};
	return DVAR_OK;
}

int dvar_diff_report_attr_at(const dvar_diff_report *rep, size_t i, size_t k, const char **key,
                             const char **a, const char **b)
{
	if (!key || !a || !b || i >= dvar_diff_report_num_vars(rep) || k >= rep->vars[i].num_attrs)
		return dvar_error_set(DVAR_EINVAL, "dvar_diff_report_attr_at: %s",
		                      !key || !a || !b ? "NULL argument" : "index out of range");
	const attr_diff *at = &rep->vars[i].attrs[k];
	*key = at->key;
	*a = at->a;
	*b = at->b;
	return DVAR_OK;
}

int dvar_diff_report_identical(const dvar_diff_report *rep)
{
	if (!rep || rep->num_only[0] || rep->num_only[1])
		return 0;
	for (size_t i = 0; i < rep->num_vars; i++)
		if (rep->vars[i].status != DVAR_DIFF_EQUAL || rep->vars[i].num_attrs)
			return 0;
	return 1;
}
