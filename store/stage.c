/*
 * store/stage.c - a save's staging and its replica check (store/save.h):
 * the SUM and MEAN aggregates, the copies of what this worker writes into
 * the staging arena (from GPUs through runtime/device.h), and the checksums
 * of mirrored replicas, compared across every worker before a commit.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "runtime/device.h"
#include "runtime/runtime.h"
#include "store/save.h"

/* The replica check locates a mismatch to a piece this large; a piece is
 * also what a replica's thread takes on in a staging run. Within a piece
 * the work goes in cache-sized blocks: each block of the primary is read
 * from memory once, and copied, checksummed and compared with the other
 * replicas' while it is in cache. */
#define CHECK_CHUNK ((size_t)1 << 20)
#define COPY_BLOCK ((size_t)128 << 10)

/* ---------------------------------------------------------------- staging */

/* Staging memory: page-locked on a GPU strategy, where device copies land in it. */
static unsigned char *arena_alloc(dvar_strategy *s, size_t bytes)
{
	unsigned char *p = dvar_page_alloc(bytes, 0);

	if (p && dvar_mem_pin(s, p, bytes) != DVAR_OK) {
		free(p);
		return NULL;
	}
	if (!p)
		dvar_error_set(DVAR_ENOMEM, "out of memory for %zu bytes of staging", bytes);
	return p;
}

void dvar_store_arena_free(dvar_strategy *s, unsigned char *p)
{
	dvar_mem_unpin(s, p);
	free(p);
}

/* A SUM or MEAN aggregate: a collective every worker takes part in. */
static int reduced(const item *it)
{
	return it->kind == KIND_SYNC_ON_READ && it->agg != DVAR_AGG_ONLY_FIRST_REPLICA &&
	       it->nbytes;
}

/*
 * An asynchronous save judges the replicas when the save is finished, so
 * that the stall is the copy (not with DVAR_SAVE_ALLOW_REPLICA_MISMATCH: its
 * mark goes into the entries, so the verdict must come before they are
 * written). On host memory the check reads the values after the call
 * returns, holding them (dvar_store_check_start); on GPUs the other
 * replicas are checksummed before the return, and the primary's share from
 * its staged copy, in the background.
 */
static int defers(const save_job *j, const item *it, int local)
{
	/* A delta stages changed rows (or nothing): its checksums come from the value. */
	return j->late_verdict && dvar_mem_on_device(j->s) && it->checked && local == 0 &&
	       it->writer == j->worker && it->delta == DVAR_DELTA_WHOLE;
}

/* The phase in which host replicas are compared (save.h). */
static int check_phase(const save_job *j)
{
	return j->async && !j->late_verdict ? PHASE_VALUES : PHASE_CHECK;
}

#define PAGE_ROUND(n) (((n) + 4095u) & ~(size_t)4095u)

/* What this worker writes and cannot borrow: a synchronous save reads
 * mirrored values, shards and plain data in place; aggregates always need a
 * buffer, and so do values on GPUs, and a delta's changed rows, gathered
 * into the arena that the next save reuses (its pages already touched). */
static int staged(const save_job *j, const item *it)
{
	return it->writer == j->worker && it->nbytes && it->delta != DVAR_DELTA_SAME &&
	       (j->async || reduced(it) || (it->v && dvar_mem_on_device(j->s)) ||
	        it->delta == DVAR_DELTA_ROWS);
}

/* A delta's changed rows are staged alone, gathered on the host; from a GPU
 * the whole value comes over and the rows are gathered when written. */
static int packs(const save_job *j, const item *it)
{
	return it->delta == DVAR_DELTA_ROWS && !(it->v && dvar_mem_on_device(j->s));
}

static size_t staged_bytes(const save_job *j, const item *it)
{
	return packs(j, it) ? (size_t)it->nrows * it->row_bytes : it->nbytes;
}

/* The checksum numbering, from the agreed list alone; then the staging
 * buffers, carved page-aligned out of the job's arena. */
int dvar_store_stage_alloc(save_job *j)
{
	size_t need = 0, off = 0;

	for (size_t i = 0; i < j->n; i++) {
		item *it = &j->items[i];

		/* One replica in all has nothing to be compared with. */
		it->checked = it->kind == KIND_MIRRORED && it->nbytes && j->R * j->W > 1 &&
		              !(j->flags & DVAR_SAVE_SKIP_REPLICA_CHECK);
		if (it->checked) {
			it->chunk0 = j->nchunks;
			j->nchunks += (it->nbytes + CHECK_CHUNK - 1) / CHECK_CHUNK;
		}
	}
	if (j->nchunks && (!(j->sums = calloc((size_t)j->R * j->nchunks, sizeof *j->sums)) ||
	                   !(j->differs = calloc(j->nchunks, sizeof *j->differs))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t i = 0; i < j->n; i++)
		if (staged(j, &j->items[i]))
			need += PAGE_ROUND(staged_bytes(j, &j->items[i]));
	if (need > j->arena_cap) {
		dvar_store_arena_free(j->s, j->arena);
		j->arena_cap = 0;
		if (!(j->arena = arena_alloc(j->s, need)))
			return dvar_error_prefix("staging");
		j->arena_cap = need;
	}
	for (size_t i = 0; i < j->n; i++)
		if (staged(j, &j->items[i])) {
			j->items[i].owned = j->arena + off;
			j->items[i].packed = packs(j, &j->items[i]);
			off += PAGE_ROUND(staged_bytes(j, &j->items[i]));
		}
	return DVAR_OK;
}

/* Checksum src in CHECK_CHUNK pieces into sums. */
static void checksum(uint32_t *sums, const unsigned char *src, size_t n)
{
	for (size_t off = 0; off < n; off += CHECK_CHUNK)
		*sums++ = dvar_crc32c(src + off, n - off < CHECK_CHUNK ? n - off : CHECK_CHUNK);
}

/*
 * A GPU replica's value in a staging run (PHASE_VALUES, synchronous saves
 * too): the keeper's starts coming to its staging buffer on the replica's
 * snapshot stream (stage_device_finish waits for all of them, then takes
 * their checksums), and the other replicas' are checksummed from host
 * copies, piece by piece.
 */
static int stage_device(save_job *j, item *it, int local, int keeper)
{
	const unsigned char *src = dvar_variable_component(it->v, local);
	uint32_t *sums = j->sums + (size_t)local * j->nchunks + it->chunk0;
	unsigned char *bounce;
	int rc = DVAR_OK;

	if (keeper)
		return dvar_mem_snapshot(j->s, local, it->owned, src, it->nbytes) == DVAR_OK
		               ? DVAR_OK
		               : dvar_error_prefix("saving '%s'", it->name);
	if (!it->checked)
		return DVAR_OK;
	if (!(bounce = malloc(CHECK_CHUNK)))
		return dvar_error_set(DVAR_ENOMEM, "saving '%s': out of memory", it->name);
	for (size_t off = 0; off < it->nbytes && rc == DVAR_OK; off += CHECK_CHUNK) {
		size_t len = it->nbytes - off < CHECK_CHUNK ? it->nbytes - off : CHECK_CHUNK;

		if ((rc = dvar_mem_copy(j->s, local, bounce, src + off, len)) == DVAR_OK)
			*sums++ = dvar_crc32c_extend(0, bounce, len);
	}
	free(bounce);
	return rc == DVAR_OK ? DVAR_OK : dvar_error_prefix("saving '%s'", it->name);
}

/* The end of a GPU replica's staging run: its copies have landed, and the
 * checked ones are checksummed from them. */
static int stage_device_finish(save_job *j, int local)
{
	if (dvar_mem_snapshot_wait(j->s, local) != DVAR_OK)
		return dvar_error_prefix("saving: copying from the GPU");
	for (size_t i = 0; i < j->n; i++) {
		item *it = &j->items[i];

		if (it->v && it->nbytes && !reduced(it) && local == 0 && it->writer == j->worker &&
		    it->checked && !defers(j, it, local))
			checksum(j->sums + it->chunk0, it->owned, it->nbytes);
	}
	return DVAR_OK;
}

/*
 * An aggregate (SUM, MEAN) of a GPU variable: reduced on the GPUs from the
 * components themselves, the keeper's result copied to its staging buffer.
 */
static int stage_device_aggregate(save_job *j, dvar_replica *ctx, item *it, int keeper)
{
	int local = dvar_replica_local_id(ctx);
	dvar_reduce_op op = it->agg == DVAR_AGG_MEAN ? DVAR_REDUCE_MEAN : DVAR_REDUCE_SUM;
	void *tmp = dvar_mem_alloc(j->s, local, it->nbytes, 0);
	int rc;

	if (!tmp)
		return dvar_error_prefix("saving '%s'", it->name);
	rc = dvar_replica_all_reduce(ctx, op, it->dtype, dvar_variable_component(it->v, local), tmp,
	                             it->nbytes / dvar_dtype_size(it->dtype));
	if (rc == DVAR_OK && keeper)
		rc = dvar_mem_copy(j->s, local, it->owned, tmp, it->nbytes);
	dvar_mem_free(j->s, local, tmp);
	return rc == DVAR_OK ? DVAR_OK : dvar_error_prefix("saving '%s'", it->name);
}

/* ---------------------------------------------------------------- host values */

/* What a staging run does with a host value (mirrored, or ONLY_FIRST_REPLICA). */
enum { DO_COPY = 1, DO_SUM = 2, DO_COMPARE = 4 };

static int host_work(const save_job *j, const item *it)
{
	int work = 0;

	if (!it->v || !it->nbytes || reduced(it))
		return 0;
	if (j->phase == PHASE_VALUES && it->owned && !it->packed)
		work |= DO_COPY; /* into staging, for the writer */
	if (it->checked && j->phase == check_phase(j)) {
		if (j->R > 1)
			work |= DO_COMPARE;
		if (j->W > 1 && !defers(j, it, 0))
			work |= DO_SUM; /* for the comparison between workers */
	}
	return work;
}

/*
 * One piece of a host value, at off: the primary's bytes copied into
 * staging, checksummed for the comparison between workers, and compared
 * with every other local replica's, block by block. Records the lowest
 * local replica whose piece differs (0: none).
 */
static void stage_piece(save_job *j, const item *it, int work, size_t off)
{
	size_t len = it->nbytes - off < CHECK_CHUNK ? it->nbytes - off : CHECK_CHUNK;
	size_t c = it->chunk0 + off / CHECK_CHUNK;
	const unsigned char *primary = (const unsigned char *)dvar_variable_component(it->v, 0) + off;
	uint32_t crc = 0;
	int differs = 0;

	for (size_t b = 0; b < len; b += COPY_BLOCK) {
		size_t bl = len - b < COPY_BLOCK ? len - b : COPY_BLOCK;

		if (work & DO_COPY)
			dvar_copy_stream(it->owned + off + b, primary + b, bl);
		if (work & DO_SUM)
			crc = dvar_crc32c_extend(crc, primary + b, bl);
		for (int r = 1; (work & DO_COMPARE) && r < (differs ? differs : j->R); r++)
			if (memcmp((const unsigned char *)dvar_variable_component(it->v, r) + off + b,
			           primary + b, bl) != 0) {
				differs = r;
				break;
			}
	}
	if (work & DO_SUM)
		j->sums[c] = crc;
	if (work & DO_COMPARE)
		j->differs[c] = differs;
}

/*
 * A replica's share of the host values' work: their pieces are dealt out to
 * the local replicas in turn, so that the copies, checksums and comparisons
 * of one worker run on all its replicas' threads at once, each piece on one
 * (its results in its own slots).
 */
static void stage_host(save_job *j, int local)
{
	size_t piece = 0;

	for (size_t i = 0; i < j->n; i++) {
		const item *it = &j->items[i];
		int work = host_work(j, it);

		for (size_t off = 0; work && off < it->nbytes; off += CHECK_CHUNK, piece++)
			if (piece % (size_t)j->R == (size_t)local)
				stage_piece(j, it, work, off);
	}
}

/*
 * A staging run, on every replica: the SUM and MEAN aggregates (TF's
 * OnReadPolicy._get_cross_replica, the same collective and bytes as
 * dvar_variable_read cross-replica, but from replica context, so an open
 * function scope is not marked: TF saves in a save context), and this
 * replica's share of the copies into staging and of the replica check
 * (stage_host; on GPUs each replica checksums its own component).
 */
static int stage_replica(dvar_replica *ctx, void *arg)
{
	save_job *j = arg;
	int local = dvar_replica_local_id(ctx);
	int rc = DVAR_OK;

	if (j->stage_error.code != DVAR_OK)
		return dvar_error_set(j->stage_error.code, "%s", j->stage_error.message);
	for (size_t i = 0; i < j->n && rc == DVAR_OK; i++) {
		item *it = &j->items[i];
		int keeper = local == 0 && it->writer == j->worker;

		if (reduced(it) && j->phase == PHASE_VALUES && dvar_mem_on_device(j->s)) {
			rc = stage_device_aggregate(j, ctx, it, keeper);
		} else if (it->v && it->nbytes && !reduced(it) && dvar_mem_on_device(j->s)) {
			if (j->phase == PHASE_VALUES)
				rc = stage_device(j, it, local, keeper);
		} else if (reduced(it) && j->phase == PHASE_VALUES) {
			unsigned char *buf = keeper ? it->owned : malloc(it->nbytes);
			dvar_reduce_op op = it->agg == DVAR_AGG_MEAN ? DVAR_REDUCE_MEAN : DVAR_REDUCE_SUM;

			if (!buf)
				return dvar_error_set(DVAR_ENOMEM, "saving '%s': out of memory",
				                      it->name);
			rc = dvar_variable_read(it->v, ctx, buf, it->nbytes);
			if (rc == DVAR_OK)
				rc = dvar_replica_all_reduce(ctx, op, it->dtype, buf, buf,
				                             it->nbytes / dvar_dtype_size(it->dtype));
			if (!keeper)
				free(buf);
			if (rc != DVAR_OK)
				rc = dvar_error_prefix("saving '%s'", it->name);
		} else if (it->v && keeper && it->packed && j->phase == PHASE_VALUES) {
			/* A delta's changed rows, gathered from the primary. */
			dvar_store_gather_rows(it, dvar_variable_component(it->v, 0), it->owned);
		}
	}
	if (rc == DVAR_OK && j->phase == PHASE_VALUES && dvar_mem_on_device(j->s))
		rc = stage_device_finish(j, local);
	if (rc == DVAR_OK && !dvar_mem_on_device(j->s))
		stage_host(j, local);
	return rc;
}

void dvar_store_point_at_data(save_job *j)
{
	static const unsigned char empty[1];

	for (size_t i = 0; i < j->n; i++) {
		item *it = &j->items[i];

		if (it->writer != j->worker)
			continue;
		if (it->nbytes == 0)
			it->data = empty;
		else if (it->owned)
			it->data = it->owned;
		else if (it->kind == KIND_PLAIN || it->kind == KIND_SHARDED ||
		         it->kind == KIND_ITERATOR)
			it->data = it->src;
		else
			/* Mirrored: the primary (TF's read_var). ONLY_FIRST_REPLICA:
			 * replica 0's value, this worker's primary. */
			it->data = dvar_variable_component(it->v, 0);
		if ((it->kind == KIND_PLAIN || it->kind == KIND_SHARDED ||
		     it->kind == KIND_ITERATOR) && it->owned) {
			if (it->packed)
				dvar_store_gather_rows(it, it->src, it->owned);
			else
				memcpy(it->owned, it->src, it->nbytes);
		}
	}
}

/* ---------------------------------------------------------------- the replica check */

void dvar_store_checksum_deferred(save_job *j)
{
	for (size_t i = 0; i < j->n; i++)
		if (defers(j, &j->items[i], 0))
			checksum(j->sums + j->items[i].chunk0, j->items[i].owned, j->items[i].nbytes);
}

static size_t pieces(const item *it)
{
	return (it->nbytes + CHECK_CHUNK - 1) / CHECK_CHUNK;
}

/* Take and check a piece of held item it; 0 when none is left to take. The
 * last piece done releases it. */
static int check_one(save_job *j, item *it)
{
	size_t k = atomic_fetch_add(&it->claimed, 1);

	if (k >= pieces(it))
		return 0;
	stage_piece(j, it, host_work(j, it), k * CHECK_CHUNK);
	if (atomic_fetch_sub(&it->left, 1) == 1) {
		dvar_track_release(it->hold);
		atomic_fetch_sub(&j->unchecked, 1);
	}
	return 1;
}

/* dvar_track_helper: a piece of t's value (NULL: none), else the first left. */
static int check_some(void *arg, const dvar_track *t)
{
	save_job *j = arg;

	for (size_t i = 0; t && i < j->n; i++)
		if (j->items[i].hold == t) {
			if (check_one(j, &j->items[i]))
				return 1;
			break;
		}
	/* check_from only skips items with nothing left: a racy store that
	 * moves it back costs a rescan, never a piece. */
	for (size_t i = atomic_load(&j->check_from); i < j->n; i++) {
		if (j->items[i].hold && check_one(j, &j->items[i]))
			return 1;
		atomic_store(&j->check_from, i + 1);
	}
	return 0;
}

static void *check_held(void *arg)
{
	while (check_some(arg, NULL))
		;
	return NULL;
}

void dvar_store_check_start(save_job *j)
{
	size_t held = 0;

	if (!j->late_verdict || dvar_mem_on_device(j->s))
		return;
	j->phase = PHASE_CHECK;
	j->helper.help = check_some;
	j->helper.arg = j;
	for (size_t i = 0; i < j->n; i++) {
		item *it = &j->items[i];

		if (host_work(j, it)) {
			it->hold = dvar_variable_track(it->v);
			atomic_init(&it->claimed, 0);
			atomic_init(&it->left, pieces(it));
			held++;
		}
	}
	if (!held)
		return;
	atomic_store(&j->unchecked, held);
	for (size_t i = 0; i < j->n; i++)
		if (j->items[i].hold)
			dvar_track_hold(j->items[i].hold, &j->helper);
	/* Without a thread, the check runs before the call returns. */
	if (pthread_create(&j->checker, NULL, check_held, j) == 0)
		j->checking = 1;
	else
		check_held(j);
}

void dvar_store_check_join(save_job *j)
{
	if (j->checking)
		pthread_join(j->checker, NULL);
	j->checking = 0;
	/* The checker took the last piece; the helpers finish theirs. */
	dvar_track_helper_drain(&j->helper);
}

/*
 * Round 3's payload: for every checked item, the first local replica that
 * differs from this worker's primary and the chunk where (-1, -1 when none),
 * then this worker's primary checksums.
 */
static unsigned char *check_payload(const save_job *j, size_t *len)
{
	size_t nchecked = 0;
	unsigned char *p, *q;

	for (size_t i = 0; i < j->n; i++)
		nchecked += j->items[i].checked;
	*len = 16 * nchecked + 4 * j->nchunks;
	if (!(p = malloc(*len ? *len : 1)))
		return NULL;
	q = p;
	for (size_t i = 0; i < j->n; i++) {
		const item *it = &j->items[i];
		size_t chunks = (it->nbytes + CHECK_CHUNK - 1) / CHECK_CHUNK;
		int64_t bad[2] = { -1, -1 };

		if (!it->checked)
			continue;
		/* The lowest replica that differs anywhere, and its first piece. */
		for (size_t c = 0; c < chunks; c++) {
			int r = j->differs[it->chunk0 + c];

			if (r && (bad[0] < 0 || r < bad[0])) {
				bad[0] = r;
				bad[1] = (int64_t)c;
			}
		}
		memcpy(q, bad, 16);
		q += 16;
	}
	if (j->nchunks)
		memcpy(q, j->sums, 4 * j->nchunks);
	return p;
}

static int report_mismatch(const save_job *j, const item *it, int replica, int against,
                           int64_t chunk)
{
	uint64_t lo = (uint64_t)chunk * CHECK_CHUNK;
	uint64_t hi = lo + CHECK_CHUNK < it->nbytes ? lo + CHECK_CHUNK : it->nbytes;

	return dvar_error_set(DVAR_EMISMATCH,
	                      "mirrored variable '%s': replica %d (worker %d) differs from "
	                      "replica %d (worker %d) in bytes [%llu, %llu); pass "
	                      "DVAR_SAVE_ALLOW_REPLICA_MISMATCH to save the primary anyway",
	                      it->name, replica, replica / j->R, against, against / j->R,
	                      (unsigned long long)lo, (unsigned long long)hi);
}

/*
 * Every worker judges every worker's report the same way: the first item
 * (in list order) whose replicas differ, within a worker or between a
 * worker's primary and worker 0's. With DVAR_SAVE_ALLOW_REPLICA_MISMATCH
 * such items are only marked.
 */
static int judge_replicas(save_job *j, const unsigned char *all, const size_t *offs)
{
	size_t slot = 0;

	for (size_t i = 0; i < j->n; i++) {
		item *it = &j->items[i];
		size_t chunks = (it->nbytes + CHECK_CHUNK - 1) / CHECK_CHUNK;
		size_t nchecked_bytes;

		if (!it->checked)
			continue;
		nchecked_bytes = (offs[1] - offs[0]) - 4 * j->nchunks;
		for (int w = 0; w < j->W && !it->mismatch; w++) {
			const unsigned char *base = all + offs[w];
			const unsigned char *sums0 = all + offs[0] + nchecked_bytes;
			const unsigned char *sums = base + nchecked_bytes;
			int64_t bad[2];

			memcpy(bad, base + 16 * slot, 16);
			/* Marked only when allowed, judged then before the part is
			 * written: otherwise its writer may be reading the mark. */
			if (bad[0] >= 0) {
				if (!(j->flags & DVAR_SAVE_ALLOW_REPLICA_MISMATCH))
					return report_mismatch(j, it, w * j->R + (int)bad[0], w * j->R,
					                       bad[1]);
				it->mismatch = 1;
			}
			for (size_t c = 0; c < chunks && w > 0 && !it->mismatch; c++)
				if (memcmp(sums + 4 * (it->chunk0 + c), sums0 + 4 * (it->chunk0 + c), 4)) {
					if (!(j->flags & DVAR_SAVE_ALLOW_REPLICA_MISMATCH))
						return report_mismatch(j, it, w * j->R, 0, (int64_t)c);
					it->mismatch = 1;
				}
		}
		slot++;
	}
	return DVAR_OK;
}

int dvar_store_stage(save_job *j, int phase)
{
	int work = 0;

	for (size_t i = 0; i < j->n; i++) {
		const item *it = &j->items[i];

		/* A delta's kinds are agreed: the same decision on every worker. */
		work |= phase == PHASE_VALUES ? reduced(it) || (j->async && it->v && it->nbytes) ||
		                                        (it->v && it->delta == DVAR_DELTA_ROWS)
		                              : it->checked;
	}
	if (!work)
		return DVAR_OK;
	j->phase = phase;
	return dvar_strategy_run(j->s, stage_replica, j);
}

/* On GPUs every replica checksummed its own component: which differ from the primary's. */
static void compare_device_sums(save_job *j)
{
	for (size_t c = 0; c < j->nchunks; c++) {
		j->differs[c] = 0;
		for (int r = 1; r < j->R && !j->differs[c]; r++)
			if (j->sums[(size_t)r * j->nchunks + c] != j->sums[c])
				j->differs[c] = r;
	}
}

/* Round 3's payload (check_payload) from every worker, judged alike by all. */
int dvar_store_agree_on_replicas(save_job *j, int rc)
{
	unsigned char *payload = NULL, *all = NULL;
	size_t len = 0, *offs = NULL;

	if (rc == DVAR_OK && dvar_mem_on_device(j->s))
		compare_device_sums(j);
	if (rc == DVAR_OK && !(payload = check_payload(j, &len)))
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (rc == DVAR_OK && !(offs = malloc(((size_t)j->W + 1) * sizeof *offs)))
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	/* A failure sends no payload (check_payload may have set len and then
	 * failed to allocate it). */
	rc = dvar_store_agree(j->s, rc, payload, rc == DVAR_OK ? len : 0, offs ? &all : NULL, offs);
	if (rc == DVAR_OK)
		rc = judge_replicas(j, all, offs);
	free(payload);
	free(all);
	free(offs);
	return rc;
}
