/*
 * format/writer.c - writes one checkpoint: each slice is cut into chunks that
 * are sampled for lz4, checksummed and written at reserved, page-aligned
 * offsets in parallel on the thread pool; the index is written last, then
 * the temporary directory is fsynced and renamed into place.
 *
 * A slice's bytes come whole (dvar_writer_add) or in pieces through a few
 * staging buffers (dvar_writer_begin_slice / _write / _end_slice); both go
 * through the same chunk writer. Raw-only writes give chunk offsets in chunk
 * order, so a raw slice is one contiguous run of its data file.
 *
 * A checkpoint is written by one or more parts: each part (a process, or a
 * writer within one) writes its own data file into a shared staging
 * directory; parts.c encodes its entries and, in the chief, gathers
 * everyone's, writes the index and commits. dvar_writer_open and
 * dvar_writer_commit are the one-part case, whose staging directory is
 * private to the writer (a temporary name of this process, format.h) and
 * removed by dvar_writer_free when not committed. A shared staging directory belongs to
 * no writer: it is renamed into place by the chief or removed by
 * dvar_writer_abort_parts.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "format/writer.h"

/* Chunks at least this large go through O_DIRECT, which writes 2-3x faster
 * than the page cache here; small ones are buffered to avoid a synchronous
 * device round trip per small tensor. */
#define DIRECT_MIN (256u << 10)
/* lz4 acceleration: on zero-row (embedding) data 8 keeps the ratio of 1 and
 * runs 2-4x faster; on data it cannot compress it gives up sooner. */
#define LZ4_ACCELERATION 8
/* Until this save has timed lz4 chunks of its own, AUTO compresses only
 * when the sample ran at least this fast, summed over the threads that can
 * encode at once (w->coders):
 * slower compression would make the save slower than writing the raw bytes
 * (~1.7 GB/s here). Zero-row data samples at 3-3.5 GB/s on two cores,
 * element-sparse data (lz4 saves ~30% but slowly) at ~0.8. */
#define LZ4_MIN_SAMPLE_BYTES_PER_SEC 2.0e9
#define SAMPLE_PIECE (16u << 10)
/* AUTO's accounts forget: each is halved once it holds this many chunks. */
#define AUTO_WINDOW_CHUNKS 16
/* AUTO takes the CPU time of one chunk's encoding in this many: a thread's
 * CPU clock takes its run queue's lock, and under I/O on a small VM that
 * averaged 0.4 ms a call (up to 5 ms): two calls a chunk made saves of
 * zero-row data 11-13 % slower than LZ4's (6 pairs). */
#define CPU_SAMPLE 8
/* One compressible chunk in this many goes the way that looked slower, so
 * that both accounts follow a CPU or a disk that got busier or freer. */
#define AUTO_EXPLORE 64
/* A data file is allocated ahead of its writes, as much again as it holds
 * up to this much: on ext4 an O_DIRECT write past the end of the file
 * (which moves the size) waits for every other write, so the threads'
 * writes would go one at a time (measured here: 2 threads of 4 MiB writes,
 * 0.2-0.4 GB/s into a growing file, 0.4-1.0 into an allocated one). A
 * slice is allocated whole before its writes start, since fallocate
 * itself waits for the writes in flight: a stretch at a time, as chunks
 * reach it, stalled them ten times over 512 MiB (write phase 0.11-0.12 s,
 * against 0.09 s allocated at once). */
#define PREALLOC_MAX (64u << 20)

unsigned dvar__lz4_delay_us;

/* ---------------------------------------------------------------- names */

static uint64_t hash_name(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static dvar_var_entry *find_var(dvar_writer *w, const char *name)
{
	if (!w->table_cap)
		return NULL;
	for (size_t i = hash_name(name) & (w->table_cap - 1);; i = (i + 1) & (w->table_cap - 1)) {
		if (!w->table[i])
			return NULL;
		if (strcmp(w->vars[w->table[i] - 1].name, name) == 0)
			return &w->vars[w->table[i] - 1];
	}
}

static int table_insert(dvar_writer *w, size_t index)
{
	if ((w->num_vars + 1) * 2 > w->table_cap) {
		size_t cap = w->table_cap ? w->table_cap * 2 : 64;
		uint32_t *t = calloc(cap, sizeof(uint32_t));
		if (!t)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		free(w->table);
		w->table = t;
		w->table_cap = cap;
		for (size_t v = 0; v < w->num_vars; v++)
			if (v != index)
				table_insert(w, v);
	}
	size_t i = hash_name(w->vars[index].name) & (w->table_cap - 1);
	while (w->table[i])
		i = (i + 1) & (w->table_cap - 1);
	w->table[i] = (uint32_t)index + 1;
	return DVAR_OK;
}

/* ---------------------------------------------------------------- buffers */

static unsigned char *buffer_get(dvar_writer *w)
{
	unsigned char *p = dvar_stash_pop(w->buffers);
	if (!p && !(p = dvar_page_alloc(w->buffer_size, 0)))
		dvar_error_set(DVAR_ENOMEM, "out of memory (%zu bytes of chunk buffer)", w->buffer_size);
	return p;
}

/* ---------------------------------------------------------------- open */

int dvar_write_options_init(dvar_write_options *opts, unsigned int version)
{
	static const dvar_write_options init = DVAR_WRITE_OPTIONS_INIT;
	return dvar_options_init(opts, sizeof *opts, &init, "dvar_write_options", version,
	                         DVAR_WRITE_OPTIONS_VERSION);
}

static int check_options(dvar_write_options *o, const dvar_write_options *in)
{
	dvar_write_options def = DVAR_WRITE_OPTIONS_INIT;
	*o = in ? *in : def;
	if (dvar_check_version("dvar_write_options", o->version, DVAR_WRITE_OPTIONS_VERSION))
		return DVAR_EINVAL;
	if (!o->chunk_size)
		o->chunk_size = DVAR_DEFAULT_CHUNK_SIZE;
	if (o->chunk_size % DVAR_ALIGN || o->chunk_size > DVAR_MAX_CHUNK)
		return dvar_error_set(DVAR_EINVAL, "chunk size %llu must be a multiple of %u from %u to %u",
		                      (unsigned long long)o->chunk_size, DVAR_ALIGN, DVAR_ALIGN, DVAR_MAX_CHUNK);
	if (o->compress != DVAR_COMPRESS_AUTO && o->compress != DVAR_COMPRESS_NONE &&
	    o->compress != DVAR_COMPRESS_LZ4)
		return dvar_error_set(DVAR_EINVAL, "unknown compression mode %d", (int)o->compress);
	if (o->keep_last < 0)
		return dvar_error_set(DVAR_EINVAL, "keep_last %d is negative", o->keep_last);
	return DVAR_OK;
}

static int check_token(const char *token)
{
	size_t n = token ? strlen(token) : 0;
	if (n == 0 || n > DVAR_MAX_TOKEN || strspn(token, DVAR_TOKEN_CHARS) != n)
		return dvar_error_set(DVAR_EINVAL, "save token '%s' must be 1 to %d characters of "
		                      "[A-Za-z0-9_-]", token ? token : "(null)", DVAR_MAX_TOKEN);
	return DVAR_OK;
}

/* dir without trailing slashes (malloc'ed), or an error. */
static int normalize_dir(const char *dir, char **out)
{
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		len--;
	*out = NULL;
	if (!len)
		return dvar_error_set(DVAR_EINVAL, "empty checkpoint path");
	if (!(*out = strndup(dir, len)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	return DVAR_OK;
}


/* The step checkpoint's directory and name under root. */
static int step_dir(const char *root, int64_t step, char *name, size_t cap, char **dir)
{
	*dir = NULL;
	if (step < 0)
		return dvar_error_set(DVAR_EINVAL, "step %lld is negative", (long long)step);
	snprintf(name, cap, "ckpt-%lld", (long long)step);
	if (!(*dir = dvar_path_join(root, name)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	return DVAR_OK;
}

/*
 * Open part `part` of `nparts`. token NULL: a private staging directory
 * (dvar_writer_open), created here and nowhere else; otherwise the shared
 * one of that token, which every part creates if missing.
 */
static int open_dir(dvar_writer **out, const char *dir, const dvar_write_options *opts,
                    const char *root, const char *step_name, const char *token,
                    int part, int nparts)
{
	dvar_writer *w = calloc(1, sizeof(*w));
	int rc = DVAR_OK;
	*out = NULL;
	if (!w)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	w->fd = w->fd_direct = w->lock_fd = -1;
	w->owner = pthread_self();
	if ((rc = check_options(&w->opts, opts)))
		goto fail;
	if (nparts < 1 || nparts > DVAR_MAX_PARTS || part < 0 || part >= nparts) {
		rc = dvar_error_set(DVAR_EINVAL, "part %d of %d: need 0 <= part < parts <= %d", part,
		                    nparts, DVAR_MAX_PARTS);
		goto fail;
	}
	w->part = (uint32_t)part;
	w->nparts = (uint32_t)nparts;
	w->shared = token != NULL;
	if (token && (rc = check_token(token)))
		goto fail;
	if (!(w->buffers = dvar_stash_create())) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto fail;
	}
	/* Room for a chunk compressed in the worst case, padded to the alignment. */
	w->buffer_size = (size_t)LZ4_compressBound((int)w->opts.chunk_size) + DVAR_ALIGN;

	if ((rc = normalize_dir(dir, &w->final_dir)))
		goto fail;
	if (root && (!(w->root = strdup(root)) || !(w->step_name = strdup(step_name)))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto fail;
	}
	/* Under a root, a checkpoint of this step that the pointer file does
	 * not list is a failed save's, which the chief replaces (it has dropped
	 * it already: dvar_root_drop_unlisted); the other parts may open before
	 * it has, and go on. */
	if (dvar_fs_exists(w->final_dir)) {
		int listed = 1;
		if (root && part != 0 && (rc = dvar_root_listed(root, step_name, &listed)))
			goto fail;
		if (listed) {
			rc = dvar_error_set(DVAR_EEXISTS, "checkpoint '%s' already exists", w->final_dir);
			goto fail;
		}
	}
	if (token)
		snprintf(w->token, sizeof(w->token), "%s", token);
	else
		dvar_tmp_tag(w->token);
	char *parent = dvar_path_parent(w->final_dir);
	if (!parent) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto fail;
	}
	rc = dvar_fs_mkdirs(parent);
	/* What writers that died left here goes before this one adds its own. */
	if (!rc)
		dvar_tmp_sweep(parent);
	free(parent);
	/* The staging directory: a hidden sibling, so the rename stays on one file system. */
	char *staging = NULL;
	if (rc || (rc = dvar_tmp_name(w->final_dir, w->token, &staging)))
		goto fail;
	/* Parts race to create the shared directory: whoever loses finds it there. */
	if (mkdir(staging, 0777) != 0 && (!w->shared || errno != EEXIST || !dvar_fs_is_dir(staging))) {
		rc = dvar_error_set_errno(DVAR_EIO, errno, "create checkpoint '%s'", w->final_dir);
		free(staging);
		goto fail;
	}
	w->tmp_dir = staging;
	char name[32];
	dvar_data_file_name(name, sizeof(name), w->part, w->nparts);
	if (!(w->data_path = dvar_path_join(w->tmp_dir, name)) ||
	    !(w->data_shown = dvar_path_join(w->final_dir, name))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto fail;
	}
	if ((w->fd = open(w->data_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)) < 0) {
		if (errno == EEXIST)
			rc = dvar_error_set(DVAR_EEXISTS, "checkpoint '%s': part %u of this save was opened "
			                    "already, or a failed save with token '%s' was not aborted",
			                    w->final_dir, w->part, w->token);
		else
			rc = dvar_error_set_errno(DVAR_EIO, errno, "create checkpoint '%s' part %u",
			                          w->final_dir, w->part);
		goto fail;
	}
	if (!(w->opts.flags & DVAR_WRITE_NO_DIRECT_IO))
		w->fd_direct = open(w->data_path, O_WRONLY | O_DIRECT | O_CLOEXEC);
	atomic_store(&w->direct_ok, w->fd_direct >= 0);
	if ((rc = dvar_pool_create(&w->pool, dvar_pool_io_threads(w->opts.threads))))
		goto fail;
	w->coders = dvar_cpus() < dvar_pool_size(w->pool) ? dvar_cpus() : dvar_pool_size(w->pool);
	*out = w;
	return DVAR_OK;
fail:
	dvar_writer_free(w);
	return rc;
}

int dvar_writer_open(dvar_writer **out, const char *dir, const dvar_write_options *opts)
{
	if (!out || !dir)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_open: NULL argument");
	return open_dir(out, dir, opts, NULL, NULL, NULL, 0, 1);
}

static int open_step(dvar_writer **out, const char *root, int64_t step, const char *token,
                     int part, int nparts, const dvar_write_options *opts)
{
	char name[32], *dir;
	int lock = -1;
	int rc = step_dir(root, step, name, sizeof(name), &dir);
	if (!rc)
		rc = dvar_fs_mkdirs(root);
	/* One save into a root at a time: its chief holds the root's lock
	 * until it has committed (or is freed, or dies). */
	if (!rc && part == 0)
		rc = dvar_root_lock(root, &lock);
	if (!rc && part == 0)
		rc = dvar_root_drop_unlisted(root, name);
	if (!rc)
		rc = open_dir(out, dir, opts, root, name, token, part, nparts);
	if (!rc)
		(*out)->lock_fd = lock;
	else if (lock >= 0)
		close(lock);
	free(dir);
	return rc;
}

int dvar_writer_open_step(dvar_writer **out, const char *root, int64_t step,
                          const dvar_write_options *opts)
{
	if (!out || !root)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_open_step: NULL argument");
	return open_step(out, root, step, NULL, 0, 1, opts);
}

int dvar_writer_open_part(dvar_writer **out, const char *dir, const char *token, int part,
                          int nparts, const dvar_write_options *opts)
{
	if (!out || !dir || !token)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_open_part: NULL argument");
	return open_dir(out, dir, opts, NULL, NULL, token, part, nparts);
}

int dvar_writer_open_step_part(dvar_writer **out, const char *root, int64_t step,
                               const char *token, int part, int nparts,
                               const dvar_write_options *opts)
{
	if (!out || !root || !token)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_open_step_part: NULL argument");
	return open_step(out, root, step, token, part, nparts, opts);
}

static int abort_dir(const char *dir, const char *token)
{
	char *final = NULL, *staging = NULL;
	int rc = check_token(token);
	if (!rc)
		rc = normalize_dir(dir, &final);
	if (!rc)
		rc = dvar_tmp_name(final, token, &staging);
	if (!rc)
		rc = dvar_fs_rmtree(staging);
	free(final);
	free(staging);
	return rc;
}

int dvar_writer_abort_parts(const char *dir, const char *token)
{
	if (!dir || !token)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_abort_parts: NULL argument");
	return abort_dir(dir, token);
}

int dvar_writer_abort_step_parts(const char *root, int64_t step, const char *token)
{
	if (!root || !token)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_abort_step_parts: NULL argument");
	char name[32], *dir;
	int rc = step_dir(root, step, name, sizeof(name), &dir);
	if (!rc)
		rc = abort_dir(dir, token);
	free(dir);
	return rc;
}

/* ---------------------------------------------------------------- chunks */

/* One batch of chunks of a slice: chunks first .. first+n-1. */
typedef struct {
	dvar_writer *w;
	dvar_slice_entry *se;
	size_t first;
	/* The bytes: the whole slice (dvar_writer_add), or one staging buffer
	 * per chunk of the batch (streamed slices), aligned and zero-padded to
	 * a multiple of DVAR_ALIGN. */
	const unsigned char *data;
	unsigned char *const *stage;
	int preassigned; /* offsets were given in chunk order before the batch */
} add_ctx;

static uint64_t ns_since(double t0)
{
	double d = dvar_now() - t0;
	return d > 0 ? (uint64_t)(d * 1e9) : 0;
}

/* CPU time of the calling thread, in ns. */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* What the fsync of a data file cost per byte, in picoseconds, as last
 * measured in this process (dvar_writer_note_flush); 0 before any. */
static atomic_uint_least64_t flush_ps_per_byte;

void dvar_writer_note_flush(uint64_t ns, uint64_t bytes)
{
	/* A small file's fsync is mostly its fixed cost, not a rate. */
	if (bytes < ((uint64_t)16 << 20))
		return;
	uint64_t now = (uint64_t)((double)ns * 1000.0 / (double)bytes);
	uint64_t old = atomic_load(&flush_ps_per_byte);
	atomic_store(&flush_ps_per_byte, old ? (old + now) / 2 : now);
}

/* What flushing n stored bytes will cost at the commit: an O_DIRECT write
 * returns before the device has the bytes for good, and the fsync that
 * waits for them is paid per byte stored, which lz4 halves on zero rows. */
static uint64_t flush_ns(const dvar_writer *w, uint64_t n)
{
	if (w->opts.flags & DVAR_WRITE_NO_FSYNC)
		return 0;
	return (uint64_t)((double)n * (double)atomic_load(&flush_ps_per_byte) / 1000.0);
}

/* The share of a CPU a's sampled encodings got: their CPU time over their
 * time on the clock; 1 without a sample or a CPU clock. */
static double cpu_share(const dvar_cost *a)
{
	double on_cpu = (double)atomic_load(&a->sampled_cpu_ns);
	double clock = (double)atomic_load(&a->sampled_ns);
	return on_cpu > 0 && on_cpu < clock ? on_cpu / clock : 1;
}

/*
 * Nanoseconds per raw byte the chunks in account a cost the save's wall
 * time, or -1 under one chunk's worth. The encoding's CPU time is spread
 * over the CPUs the threads get at once: the CPU time over the time on the
 * clock of the sampled encodings (r, cpu_share) says how much of a CPU each
 * got, at most w->coders CPUs in all. It is then divided by the part of that share
 * other processes left (r over what the threads would get by themselves,
 * coders / threads when there are more threads than CPUs), so that a busy
 * machine turns compression off rather than slowing the save. With as many
 * threads as CPUs that is the encoding's clock time over coders * r.
 * The threads' writes together take about what one thread sees, divided
 * by the threads (DVAR_IO_DEPTH more than the CPUs); and the flush at
 * the commit comes after, per stored byte. lz4's encoding and its writes
 * overlap (one thread compresses while another writes), so the slower of
 * the two.
 */
static double cost_per_byte(const dvar_writer *w, const dvar_cost *a)
{
	double bytes = (double)atomic_load(&a->bytes), threads = dvar_pool_size(w->pool);
	if (bytes < (double)w->opts.chunk_size)
		return -1;
	double encode = (double)atomic_load(&a->encode_ns);
	double r = cpu_share(a);
	double alone = threads > w->coders ? w->coders / threads : 1;
	double left = r < alone ? r / alone : 1;
	double parallel = threads * r < w->coders ? threads * r : w->coders;
	if (parallel < 1)
		parallel = 1;
	double ratio = (double)atomic_load(&a->stored) / bytes;
	double cpu = r * encode / bytes / parallel / left;
	double write = (double)atomic_load(&a->write_ns) / bytes / threads;
	return (cpu > write ? cpu : write) + ratio * (double)flush_ns(w, 1000000) / 1e6;
}

/* A chunk of len raw bytes went one way (DVAR_CODEC_*): stored bytes, and
 * ns; cpu_ns, when its encoding's CPU time was taken (else 0). */
static void cost_add(const dvar_writer *w, dvar_cost *a, uint64_t encode_ns, uint64_t cpu_ns,
                     uint64_t write_ns, uint64_t len, uint64_t stored)
{
	uint64_t sampled = cpu_ns ? encode_ns : 0;
	uint64_t bytes = atomic_fetch_add(&a->bytes, len) + len;
	if (bytes > AUTO_WINDOW_CHUNKS * w->opts.chunk_size) {
		/* Racy halving: the figures stay about in proportion, which is all that is used. */
		atomic_store(&a->bytes, bytes / 2);
		atomic_store(&a->stored, (atomic_load(&a->stored) + stored) / 2);
		atomic_store(&a->encode_ns, (atomic_load(&a->encode_ns) + encode_ns) / 2);
		atomic_store(&a->write_ns, (atomic_load(&a->write_ns) + write_ns) / 2);
		atomic_store(&a->sampled_cpu_ns, (atomic_load(&a->sampled_cpu_ns) + cpu_ns) / 2);
		atomic_store(&a->sampled_ns, (atomic_load(&a->sampled_ns) + sampled) / 2);
	} else {
		atomic_fetch_add(&a->stored, stored);
		atomic_fetch_add(&a->encode_ns, encode_ns);
		atomic_fetch_add(&a->write_ns, write_ns);
		atomic_fetch_add(&a->sampled_cpu_ns, cpu_ns);
		atomic_fetch_add(&a->sampled_ns, sampled);
	}
}

/*
 * AUTO: compress this chunk? Each way's account holds what this save's
 * chunks actually cost, per raw byte, in the time of the thread that stored
 * them: lz4 and the write of what it left, or the write of the raw bytes;
 * each plus the flush of its stored bytes at the commit, at the rate the
 * last data file's fsync ran. The cheaper way wins, so a CPU busy with
 * other work, which slows lz4 and not the disk, turns compression off.
 * Only a chunk lz4 might win is looked at (does lz4 save >= 10% on a few
 * pieces?): while raw writes are cheaper, even of data lz4 would shrink,
 * the look itself is skipped. Until lz4 has been timed the look's speed
 * decides; until raw writes have been timed the chunk goes raw to time them.
 * One chunk in AUTO_EXPLORE refreshes the account of the way that lost.
 */
static int lz4_pays(dvar_writer *w, const unsigned char *raw, size_t len, unsigned char *out)
{
	double raw_cost = cost_per_byte(w, &w->cost[DVAR_CODEC_RAW]);
	double lz4_cost = cost_per_byte(w, &w->cost[DVAR_CODEC_LZ4]);
	int explore = atomic_fetch_add(&w->auto_tick, 1) % AUTO_EXPLORE == AUTO_EXPLORE - 1;
	int best = lz4_cost >= 0 && raw_cost >= 0 ? lz4_cost < raw_cost : -1; /* -1: not known */
	if (best == 0 && !explore)
		return 0;
	size_t pieces = len >= 4 * SAMPLE_PIECE ? 4 : 1;
	size_t plen = pieces == 1 ? len : SAMPLE_PIECE;
	size_t step = pieces == 1 ? 0 : (len - plen) / (pieces - 1);
	size_t in = 0, packed = 0;
	/* Fault the pieces in first (fresh mmap'ed input costs more to touch than
	 * to compress), so that the clock sees lz4 alone. */
	volatile unsigned char sink = 0;
	for (size_t k = 0; k < pieces; k++)
		for (size_t i = 0; i < plen; i += 4096)
			sink ^= raw[step * k + i];
	(void)sink;
	double t0 = dvar_now();
	for (size_t k = 0; k < pieces; k++) {
		int n = LZ4_compress_fast((const char *)raw + step * k, (char *)out, (int)plen,
		                          LZ4_compressBound((int)plen), LZ4_ACCELERATION);
		in += plen;
		packed += n > 0 ? (size_t)n : plen;
	}
	double secs = dvar_now() - t0;
	if (packed * 10 > in * 9)
		return 0;
	if (best == 0 || (lz4_cost < 0 && raw_cost >= 0)) {
		/* Exploring while raw writes win, or lz4 not timed yet: lz4's account
		 * is filled from the look alone (its pace on the pieces, plus the
		 * checksum and the write of what it would leave at the raw chunks'
		 * pace), not by compressing a whole chunk at a cost that can be
		 * several raw chunks' (measured: 5 % of a save of element-sparse
		 * data, exploring 1 chunk in 64). Once it holds a chunk's worth, the
		 * accounts decide, and chunks are looked at only when lz4 wins. The
		 * look is too short to sample its CPU time: it is taken to get the
		 * share of a CPU the raw chunks' encodings got. */
		const dvar_cost *r = &w->cost[DVAR_CODEC_RAW];
		double rb = (double)atomic_load(&r->bytes), stored = (double)len * (double)packed / (double)in;
		double encode = secs * (double)len / (double)in * 1e9 +
		                (double)atomic_load(&r->encode_ns) / rb * (double)len;
		cost_add(w, &w->cost[DVAR_CODEC_LZ4], (uint64_t)encode, (uint64_t)(encode * cpu_share(r)),
		         (uint64_t)((double)atomic_load(&r->write_ns) / rb * stored), len,
		         (uint64_t)stored);
		if (best == 0)
			return 0;
	}
	if (lz4_cost < 0)
		return (secs > 0 ? (double)in / secs : 1e30) * w->coders >=
		       LZ4_MIN_SAMPLE_BYTES_PER_SEC;
	if (raw_cost < 0)
		return 0;
	return explore ? !best : best;
}

static int write_padded(dvar_writer *w, const unsigned char *buf, size_t padded, uint64_t off)
{
	/* Every write of data comes here: a cancel takes effect within a chunk per thread. */
	if (dvar_writer_cancelled(w))
		return dvar_error_set(DVAR_ECANCELED, "writing '%s': cancelled", w->final_dir);
	size_t done = 0;
	if (padded >= DIRECT_MIN && atomic_load(&w->direct_ok)) {
		while (done < padded) {
			ssize_t n = pwrite(w->fd_direct, buf + done, padded - done, (off_t)(off + done));
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EINVAL && done == 0) {
				/* Some file systems refuse O_DIRECT at write time: go buffered from now on. */
				atomic_store(&w->direct_ok, 0);
				break;
			}
			if (n < 0)
				return dvar_error_set_errno(DVAR_EIO, errno,
				                            "write %zu bytes at offset %llu of '%s'", padded - done,
				                            (unsigned long long)(off + done), w->data_shown);
			/* A short write goes on from where it stopped (a disk that just
			 * filled up then says so); the rest of an unaligned one, buffered. */
			done += (size_t)n;
			if (n == 0 || done % DVAR_ALIGN != 0)
				break;
		}
		if (done == padded)
			return DVAR_OK;
	}
	return dvar_fs_pwrite_all(w->fd, buf + done, padded - done, off + done, w->data_shown);
}

/* The data file allocated up to end at least (PREALLOC_MAX). */
static void prealloc(dvar_writer *w, uint64_t end)
{
	uint64_t have = atomic_load(&w->alloc_end);
	if (end <= have || !atomic_load(&w->direct_ok))
		return;
	uint64_t want = end + (end < PREALLOC_MAX ? end : PREALLOC_MAX);
	/* One thread allocates each stretch. Writes meanwhile are correct, just
	 * slower; where fallocate is refused, the file grows as it is written. */
	if (atomic_compare_exchange_strong(&w->alloc_end, &have, want) &&
	    fallocate(w->fd, 0, (off_t)have, (off_t)(want - have)) != 0)
		atomic_store(&w->alloc_end, UINT64_MAX);
}

/* Room for len bytes at the end of the data file: their offset. */
static uint64_t reserve(dvar_writer *w, uint64_t len)
{
	uint64_t off = atomic_fetch_add(&w->next_offset, len);
	prealloc(w, off + len);
	return off;
}

static void report_progress(dvar_writer *w)
{
	if (!w->opts.progress || !pthread_equal(pthread_self(), w->owner))
		return;
	double now = dvar_now();
	if (now - w->last_progress < 1.0 / 6)
		return;
	w->last_progress = now;
	w->opts.progress(w->opts.progress_userdata, atomic_load(&w->bytes_done), 0);
}

static uint64_t padded_len(uint64_t n)
{
	return (n + DVAR_ALIGN - 1) / DVAR_ALIGN * DVAR_ALIGN;
}

/*
 * Chunk i of se, len raw bytes at raw, as it is stored: lz4 into buf when
 * that pays (buf NULL: raw always), raw otherwise. Fills the chunk's codec,
 * stored size and checksums; returns where its stored bytes are.
 */
static const unsigned char *encode_chunk(dvar_writer *w, dvar_slice_entry *se, size_t i,
                                         const unsigned char *raw, size_t len, unsigned char *buf)
{
	dvar_chunk *c = &se->chunks[i];
	c->codec = DVAR_CODEC_RAW;
	c->stored = len;
	if (buf && (w->opts.compress == DVAR_COMPRESS_LZ4 ||
	            (w->opts.compress == DVAR_COMPRESS_AUTO && lz4_pays(w, raw, len, buf)))) {
		/* A capacity of 90% makes lz4 give up when it would save less than 10%. */
		int n = LZ4_compress_fast((const char *)raw, (char *)buf, (int)len, (int)(len - len / 10),
		                          LZ4_ACCELERATION);
		if (dvar__lz4_delay_us)
			usleep(dvar__lz4_delay_us);
		if (n > 0) {
			c->codec = DVAR_CODEC_LZ4;
			c->stored = (uint64_t)n;
			c->crc = dvar_crc32c(raw, len);
			return buf;
		}
	}
	uint32_t *blocks = se->block_crcs + c->first_block;
	uint32_t crc = 0;
	for (uint32_t b = 0; b < dvar_chunk_num_blocks(se, i); b++) {
		size_t off = (size_t)b * DVAR_BLOCK_SIZE;
		size_t blen = len - off < DVAR_BLOCK_SIZE ? len - off : DVAR_BLOCK_SIZE;
		blocks[b] = dvar_crc32c(raw + off, blen);
		crc = b ? dvar_crc32c_combine(crc, blocks[b], blen) : blocks[b];
	}
	c->crc = crc;
	return raw;
}

/* The raw bytes of chunk first+k of a batch. */
static const unsigned char *chunk_raw(const add_ctx *ctx, size_t k)
{
	return ctx->stage ? ctx->stage[k] : ctx->data + (size_t)(ctx->first + k) * ctx->se->chunk_size;
}

static int write_chunk(void *vctx, size_t k)
{
	add_ctx *ctx = vctx;
	dvar_writer *w = ctx->w;
	dvar_slice_entry *se = ctx->se;
	size_t i = ctx->first + k;
	dvar_chunk *c = &se->chunks[i];
	size_t len = (size_t)dvar_chunk_raw_len(se, i);
	const unsigned char *raw = chunk_raw(ctx, k);
	/* Aligned memory padded to the alignment goes to the disk as it is;
	 * anything else is staged so that O_DIRECT sees aligned buffers. */
	int in_place = (uintptr_t)raw % DVAR_ALIGN == 0 && (len % DVAR_ALIGN == 0 || ctx->stage);
	unsigned char *buf = NULL;
	int rc;
	if ((w->opts.compress != DVAR_COMPRESS_NONE || !in_place) && !(buf = buffer_get(w)))
		return DVAR_ENOMEM;
	double t0 = dvar_now();
	int sample = w->opts.compress == DVAR_COMPRESS_AUTO &&
	             atomic_fetch_add(&w->cpu_tick, 1) % CPU_SAMPLE == 0;
	uint64_t c0 = sample ? thread_cpu_ns() : 0;
	const unsigned char *out = encode_chunk(w, se, i, raw, len,
	                                        w->opts.compress != DVAR_COMPRESS_NONE ? buf : NULL);
	if (out == raw && !in_place) {
		memcpy(buf, raw, len);
		out = buf;
	}
	size_t padded = (size_t)padded_len(c->stored);
	if (out == buf)
		memset(buf + c->stored, 0, padded - (size_t)c->stored);
	if (!ctx->preassigned)
		c->offset = reserve(w, padded);
	uint64_t encode_ns = ns_since(t0); /* lz4, checksums, copies */
	uint64_t c1 = sample ? thread_cpu_ns() : 0;
	uint64_t encode_cpu_ns = c0 && c1 > c0 ? c1 - c0 : 0; /* 0: no sample */
	double t1 = dvar_now();
	rc = write_padded(w, out, padded, c->offset);
	if (buf)
		dvar_stash_push(w->buffers, buf, free);
	if (rc == DVAR_OK) {
		if (w->opts.compress == DVAR_COMPRESS_AUTO)
			cost_add(w, &w->cost[c->codec], encode_ns, encode_cpu_ns, ns_since(t1), len, padded);
		atomic_fetch_add(&w->bytes_done, len);
		DVAR_FAULT_POINT("chunk-written");
		report_progress(w);
	}
	return rc;
}

/* ---------------------------------------------------------------- packing */

/* The block small slices are packed into: big enough for O_DIRECT's pace. */
#define PACK_BLOCK (1u << 20)

static uint64_t pack_len(uint64_t n)
{
	return (n + DVAR_PACK_ALIGN - 1) / DVAR_PACK_ALIGN * DVAR_PACK_ALIGN;
}

/* Whether se's chunks are packed: a slice too small to be worth a page of its own. */
static int packed(const dvar_writer *w, const dvar_slice_entry *se)
{
	return se->raw_bytes < DVAR_PACK_MAX && !(w->opts.flags & DVAR_WRITE_PAGE_ALIGN);
}

/* Write the block of packed chunks, giving them their offsets. */
static int flush_packed(dvar_writer *w)
{
	if (!w->pack_fill)
		return DVAR_OK;
	size_t padded = (size_t)padded_len(w->pack_fill);
	uint64_t at = reserve(w, padded);
	memset(w->pack + w->pack_fill, 0, padded - w->pack_fill);
	int rc = write_padded(w, w->pack, padded, at);
	if (rc) {
		w->broken = 1;
		return rc;
	}
	for (size_t k = 0; k < w->pack_n; k++)
		w->pack_chunks[k]->offset += at;
	w->pack_fill = 0;
	w->pack_n = 0;
	DVAR_FAULT_POINT("chunk-written");
	return DVAR_OK;
}

int dvar_writer_end_data(dvar_writer *w)
{
	int rc = flush_packed(w);
	if (rc)
		return rc;
	/* What was allocated ahead and not written goes. */
	if (atomic_load(&w->alloc_end) && ftruncate(w->fd, (off_t)atomic_load(&w->next_offset)) != 0) {
		w->broken = 1;
		return dvar_error_set_errno(DVAR_EIO, errno, "truncate '%s'", w->data_shown);
	}
	return DVAR_OK;
}

/*
 * Chunks first .. first+n-1 of a small slice, one after the other on this
 * thread, into the pack block. A slice never straddles two blocks, so that
 * a raw one is one contiguous run (dvar_reader_map).
 */
static int pack_chunks(const add_ctx *ctx, size_t n)
{
	dvar_writer *w = ctx->w;
	dvar_slice_entry *se = ctx->se;
	int rc;
	if (!w->pack && !(w->pack = dvar_page_alloc(PACK_BLOCK, 0)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory (%u bytes of packing buffer)", PACK_BLOCK);
	if (w->pack_cap < w->pack_n + n) {
		size_t cap = (w->pack_n + n) * 2;
		dvar_chunk **p = realloc(w->pack_chunks, cap * sizeof(*p));
		if (!p)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		w->pack_chunks = p;
		w->pack_cap = cap;
	}
	/* The rest of the slice must fit after what the block holds. */
	uint64_t need = 0;
	for (size_t i = ctx->first; i < se->num_chunks; i++)
		need += pack_len(dvar_chunk_raw_len(se, i));
	if (w->pack_fill + need > PACK_BLOCK && (rc = flush_packed(w)))
		return rc;
	unsigned char *buf = NULL;
	if (w->opts.compress != DVAR_COMPRESS_NONE && !(buf = buffer_get(w)))
		return DVAR_ENOMEM;
	for (size_t k = 0; k < n; k++) {
		size_t i = ctx->first + k;
		size_t len = (size_t)dvar_chunk_raw_len(se, i);
		const unsigned char *out = encode_chunk(w, se, i, chunk_raw(ctx, k), len, buf);
		dvar_chunk *c = &se->chunks[i];
		memcpy(w->pack + w->pack_fill, out, (size_t)c->stored);
		memset(w->pack + w->pack_fill + c->stored, 0, (size_t)(pack_len(c->stored) - c->stored));
		c->offset = w->pack_fill;
		w->pack_chunks[w->pack_n++] = c;
		w->pack_fill += (size_t)pack_len(c->stored);
		atomic_fetch_add(&w->bytes_done, len);
	}
	if (buf)
		dvar_stash_push(w->buffers, buf, free);
	report_progress(w);
	return DVAR_OK;
}

/* The file space chunks first .. first+n-1 of se may take: stored bytes
 * are at most the raw ones, padded. */
static uint64_t room_for(const dvar_slice_entry *se, size_t first, size_t n)
{
	uint64_t bytes = 0;
	for (size_t i = first; i < first + n; i++)
		bytes += padded_len(dvar_chunk_raw_len(se, i));
	return bytes;
}

/* Raw-only writes: chunks first .. first+n-1 of se get their offsets in order. */
static void preassign(const add_ctx *ctx, size_t n)
{
	if (ctx->preassigned)
		for (size_t i = ctx->first; i < ctx->first + n; i++)
			ctx->se->chunks[i].offset = reserve(ctx->w, padded_len(dvar_chunk_raw_len(ctx->se, i)));
}

/*
 * Write chunks first .. first+n-1 of se in parallel. Raw-only writes know
 * every chunk's stored size in advance, so their offsets are given here in
 * chunk order: a raw slice is then one contiguous run of its data file
 * (dvar_reader_map), and the file's bytes do not depend on the threads.
 * Compressed chunks take their offsets as they finish. Small slices are
 * packed instead.
 */
static int write_chunks(dvar_writer *w, dvar_slice_entry *se, size_t first, size_t n,
                        const unsigned char *data, unsigned char *const *stage)
{
	add_ctx ctx = { w, se, first, data, stage, w->opts.compress == DVAR_COMPRESS_NONE };
	if (packed(w, se))
		return n ? pack_chunks(&ctx, n) : DVAR_OK;
	prealloc(w, atomic_load(&w->next_offset) + room_for(se, first, n));
	preassign(&ctx, n);
	return dvar_pool_for(w->pool, n, write_chunk, &ctx);
}

/* ---------------------------------------------------------------- add */

static int check_name(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > DVAR_MAX_NAME)
		return dvar_error_set(DVAR_EINVAL, "variable name must be 1 to %d bytes, got %zu",
		                      DVAR_MAX_NAME, n);
	return DVAR_OK;
}

int dvar_writer_check_usable(const dvar_writer *w)
{
	if (w->broken || w->finished)
		return dvar_error_set(DVAR_EINVAL, "writer for '%s' is %s", w->final_dir,
		                      w->committed ? "already committed" :
		                      w->broken ? "unusable after an earlier error" : "already finished");
	if (w->stream.open)
		return dvar_error_set(DVAR_EINVAL, "writer for '%s': a slice of variable '%s' is being "
		                      "written; dvar_writer_end_slice must come first", w->final_dir,
		                      w->vars[w->stream_var].name);
	return DVAR_OK;
}

/* se's chunk layout for bytes of slice sl: chunks and block checksums
 * allocated, to be filled as the chunks are written. */
static int layout_entry(dvar_writer *w, dvar_slice_entry *se, const dvar_slice *sl, uint64_t bytes)
{
	memset(se, 0, sizeof(*se));
	se->slice = *sl;
	se->file = w->part;
	se->raw_bytes = bytes;
	se->chunk_size = w->opts.chunk_size;
	se->num_chunks = (size_t)((bytes + se->chunk_size - 1) / se->chunk_size);
	for (size_t i = 0; i < se->num_chunks; i++)
		se->num_block_crcs += dvar_chunk_num_blocks(se, i);
	if ((se->num_chunks && !(se->chunks = calloc(se->num_chunks, sizeof(dvar_chunk)))) ||
	    (se->num_block_crcs && !(se->block_crcs = malloc(se->num_block_crcs * sizeof(uint32_t))))) {
		dvar_slice_entry_clear(se);
		w->broken = 1;
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	/* Block checksums are laid out for every chunk; compressed chunks give theirs back in
	 * compact_entry. */
	for (size_t i = 0, blk = 0; i < se->num_chunks; i++) {
		se->chunks[i].first_block = (uint32_t)blk;
		blk += dvar_chunk_num_blocks(se, i);
	}
	return DVAR_OK;
}

/* Every chunk of se is written: keep block checksums of raw chunks only, in
 * chunk order; the stored bytes. */
static uint64_t compact_entry(dvar_slice_entry *se)
{
	size_t kept = 0;
	uint64_t stored = 0;
	for (size_t i = 0; i < se->num_chunks; i++) {
		dvar_chunk *c = &se->chunks[i];
		stored += c->stored;
		if (c->codec != DVAR_CODEC_RAW)
			continue;
		uint32_t nb = dvar_chunk_num_blocks(se, i);
		memmove(se->block_crcs + kept, se->block_crcs + c->first_block, nb * sizeof(uint32_t));
		c->first_block = (uint32_t)kept;
		kept += nb;
	}
	se->num_block_crcs = kept;
	return stored;
}

static const char *delta_text(uint32_t delta)
{
	return delta == DVAR_DELTA_SAME ? "unchanged since the base" :
	       delta == DVAR_DELTA_ROWS ? "as changed rows" : "with its values";
}

/*
 * The variable name of this writer (created when new, as mode delta), after
 * the checks every add makes: name, dtype and shape (*shape); a variable
 * added before must have the same dtype, shape and mode.
 */
static int var_for(dvar_writer *w, const char *name, int dtype, const dvar_shape *full,
                   uint32_t delta, dvar_shape *shape, dvar_var_entry **out)
{
	uint64_t full_bytes;
	int rc;
	*out = NULL;
	if ((rc = dvar_writer_check_usable(w)))
		return rc;
	if ((rc = check_name(name)))
		return rc;
	if (!dvar_dtype_size(dtype))
		return dvar_error_set(DVAR_EINVAL, "variable '%s': unknown dtype %d", name, dtype);
	if ((rc = dvar_shape_init(shape, full->rank, full->dims)) ||
	    (rc = dvar_shape_num_bytes(shape, dtype, &full_bytes)))
		return dvar_error_prefix("variable '%s'", name);
	dvar_var_entry *v = find_var(w, name);
	if (v) {
		if (v->dtype != dtype || !dvar_shape_equal(&v->shape, shape)) {
			char s1[128], s2[128];
			dvar_shape_format(&v->shape, s1, sizeof(s1));
			dvar_shape_format(shape, s2, sizeof(s2));
			return dvar_error_set(DVAR_ESHAPE, "variable '%s' was added as %s %s, now as %s %s",
			                      name, dvar_dtype_name(v->dtype), s1, dvar_dtype_name(dtype), s2);
		}
		if (v->delta != delta || delta == DVAR_DELTA_SAME)
			return dvar_error_set(DVAR_EINVAL, "variable '%s' was added %s; it cannot be added "
			                      "%s too", name, delta_text(v->delta), delta_text(delta));
		*out = v;
		return DVAR_OK;
	}
	dvar_var_entry *p = dvar_grow(w->vars, w->num_vars, &w->cap_vars, sizeof(*p), 16);
	if (!p)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	w->vars = p;
	v = &w->vars[w->num_vars];
	memset(v, 0, sizeof(*v));
	if (!(v->name = strdup(name)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	v->dtype = dtype;
	v->shape = *shape;
	v->delta = delta;
	if ((rc = table_insert(w, w->num_vars))) {
		free(v->name);
		return rc;
	}
	w->num_vars++;
	*out = v;
	return DVAR_OK;
}

/*
 * Check a slice about to be written and reserve its entry: the variable
 * (created when new) gets the entry at slices[num_slices], with its chunk
 * layout, not counted until close_slice. *vi receives the variable's index.
 */
static int open_slice(dvar_writer *w, const char *name, int dtype, const dvar_shape *full,
                      const dvar_slice *slice, int have_data, size_t *vi)
{
	int rc;
	dvar_shape shape;
	uint64_t bytes;
	dvar_var_entry *v;
	if ((rc = var_for(w, name, dtype, full, DVAR_DELTA_WHOLE, &shape, &v)))
		return rc;
	dvar_slice sl;
	if (slice)
		sl = *slice;
	else
		dvar_slice_full(&sl, &shape);
	if ((rc = dvar_slice_check(&sl, &shape)))
		return dvar_error_prefix("variable '%s'", name);
	dvar_shape sshape;
	dvar_slice_shape(&sl, &sshape);
	dvar_shape_num_bytes(&sshape, dtype, &bytes);
	if (!have_data && bytes)
		return dvar_error_set(DVAR_EINVAL, "variable '%s': data is NULL", name);

	char a[256], b[256];
	/* A new variable's first slice overlaps nothing but sets its rows_end. */
	size_t j;
	if (dvar_slice_overlaps(&sl, v->slices, v->num_slices, sizeof(*v->slices), &v->rows_end, &j)) {
		dvar_slice_describe(a, sizeof(a), &sl, &shape);
		dvar_slice_describe(b, sizeof(b), &v->slices[j].slice, &shape);
		return dvar_error_set(DVAR_ESHAPE, "variable '%s': slice %s overlaps slice %s added before",
		                      name, a, b);
	}

	dvar_slice_entry *grown = dvar_grow(v->slices, v->num_slices, &v->cap_slices,
	                                    sizeof(*grown), 1);
	if (!grown)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	v->slices = grown;
	if ((rc = layout_entry(w, &v->slices[v->num_slices], &sl, bytes)))
		return rc;
	*vi = (size_t)(v - w->vars);
	return DVAR_OK;
}

/* Every chunk of the reserved slice of variable vi is written: count it. */
static void close_slice(dvar_writer *w, size_t vi)
{
	dvar_var_entry *v = &w->vars[vi];
	dvar_slice_entry *se = &v->slices[v->num_slices];
	v->stored_bytes += compact_entry(se);
	v->raw_bytes += se->raw_bytes;
	v->num_slices++;
	report_progress(w);
}

/* A failure while the reserved slice of variable vi was being written. */
static int fail_slice(dvar_writer *w, size_t vi)
{
	dvar_var_entry *v = &w->vars[vi];
	dvar_slice_entry_clear(&v->slices[v->num_slices]);
	w->broken = 1;
	w->stream.open = 0;
	return dvar_error_prefix("variable '%s'", v->name);
}

int dvar_writer_add(dvar_writer *w, const char *name, int dtype, const dvar_shape *full,
                    const dvar_slice *slice, const void *data)
{
	size_t vi;
	int rc;
	if (!w || !full)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_add: NULL argument");
	if ((rc = open_slice(w, name, dtype, full, slice, data != NULL, &vi)))
		return rc;
	dvar_var_entry *v = &w->vars[vi];
	dvar_slice_entry *se = &v->slices[v->num_slices];
	if ((rc = write_chunks(w, se, 0, se->num_chunks, data, NULL)))
		return fail_slice(w, vi);
	close_slice(w, vi);
	return DVAR_OK;
}

/* ------------------------------------------------------- many at once */

/* A group of dvar_writer_add_many: slices of distinct variables, reserved. */
typedef struct {
	dvar_writer *w;
	add_ctx *ctxs;     /* one per slice, in request order */
	size_t *vi;        /* each slice's variable */
	uint64_t *first;   /* first[k]: the group's index of slice k's first chunk; first[n] = all */
	size_t n;
} add_group;

/* A chunk of the group; a failure names its variable (the pool returns the
 * first failure in task order). */
static int run_group_task(void *vg, size_t i)
{
	add_group *g = vg;
	size_t k = dvar_segment_of(g->first, g->n, i);
	int rc = write_chunk(&g->ctxs[k], (size_t)(i - g->first[k]));
	if (rc)
		dvar_error_prefix("variable '%s'", g->w->vars[g->vi[k]].name);
	return rc;
}

/* Every reserved slice of the group dropped, its chunks unwritten or not. */
static void drop_group(add_group *g)
{
	for (size_t k = 0; k < g->n; k++)
		dvar_slice_entry_clear(g->ctxs[k].se);
	g->n = 0;
}

/*
 * Write the reserved slices of a group, small ones packed on this thread
 * and the rest in one pool loop, with their file space allocated at once;
 * then count them. On failure every slice of the group is dropped and the
 * writer is unusable.
 */
static int write_group(dvar_writer *w, add_group *g)
{
	size_t total = 0;
	uint64_t room = 0;
	int rc = DVAR_OK;
	for (size_t k = 0; k < g->n && !rc; k++) {
		add_ctx *c = &g->ctxs[k];
		g->first[k] = total;
		if (packed(w, c->se)) {
			if (c->se->num_chunks && (rc = pack_chunks(c, c->se->num_chunks)))
				dvar_error_prefix("variable '%s'", w->vars[g->vi[k]].name);
			continue;
		}
		total += c->se->num_chunks;
		room += room_for(c->se, 0, c->se->num_chunks);
	}
	g->first[g->n] = total;
	if (!rc) {
		prealloc(w, atomic_load(&w->next_offset) + room);
		for (size_t k = 0; k < g->n; k++)
			if (!packed(w, g->ctxs[k].se))
				preassign(&g->ctxs[k], g->ctxs[k].se->num_chunks);
		/* Packed slices hold no pool chunks: their first[] is the next one's. */
		rc = dvar_pool_for(w->pool, total, run_group_task, g);
	}
	if (rc) {
		drop_group(g);
		w->broken = 1;
		return rc;
	}
	for (size_t k = 0; k < g->n; k++)
		close_slice(w, g->vi[k]);
	g->n = 0;
	return DVAR_OK;
}

int dvar_writer_add_many(dvar_writer *w, const dvar_write_request *reqs, size_t n)
{
	if (!w || (n && !reqs))
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_add_many: NULL argument");
	add_group g = { w, calloc(n ? n : 1, sizeof(add_ctx)), malloc((n ? n : 1) * sizeof(size_t)),
		        malloc((n + 1) * sizeof(uint64_t)), 0 };
	int rc = g.ctxs && g.vi && g.first ? DVAR_OK : dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t k = 0; k < n && !rc; k++) {
		const dvar_write_request *q = &reqs[k];
		if (!q->full) {
			rc = dvar_error_set(DVAR_EINVAL, "dvar_writer_add_many: request %zu has no shape", k);
			break;
		}
		/* A variable's reserved slice is its next entry: one per group. */
		const dvar_var_entry *v = q->name ? find_var(w, q->name) : NULL;
		for (size_t j = 0; v && j < g.n && !rc; j++)
			if (g.vi[j] == (size_t)(v - w->vars))
				rc = write_group(w, &g);
		size_t vi;
		if (rc || (rc = open_slice(w, q->name, q->dtype, q->full, q->slice, q->data != NULL, &vi)))
			break;
		dvar_var_entry *var = &w->vars[vi];
		g.ctxs[g.n] = (add_ctx){ w, &var->slices[var->num_slices], 0, q->data, NULL,
			                 w->opts.compress == DVAR_COMPRESS_NONE };
		g.vi[g.n++] = vi;
	}
	/* The requests before a failed check are added, as separate adds would
	 * be; a check that broke the writer (out of memory) drops them. */
	if (g.n && w->broken) {
		drop_group(&g);
	} else if (g.n) {
		int wrc = write_group(w, &g);
		if (!rc)
			rc = wrc;
	}
	free(g.ctxs);
	free(g.vi);
	free(g.first);
	return rc;
}

/* ------------------------------------------------------- streamed slices */

int dvar_writer_begin_slice(dvar_writer *w, const char *name, int dtype, const dvar_shape *full,
                            const dvar_slice *slice)
{
	size_t vi;
	int rc;
	if (!w || !full)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_begin_slice: NULL argument");
	if ((rc = open_slice(w, name, dtype, full, slice, 1, &vi)))
		return rc;
	if (!w->stage) {
		w->stage_cap = (size_t)dvar_pool_size(w->pool);
		if (!(w->stage = calloc(w->stage_cap, sizeof(*w->stage)))) {
			dvar_slice_entry_clear(&w->vars[vi].slices[w->vars[vi].num_slices]);
			w->broken = 1;
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		}
	}
	dvar_var_entry *v = &w->vars[vi];
	const dvar_slice_entry *se = &v->slices[v->num_slices];
	dvar_stream_begin(&w->stream, &se->slice, &v->shape, se->raw_bytes, "the whole variable");
	w->stream_var = vi;
	w->stream_flushed = 0;
	w->stage_fill = 0;
	w->stage_pos = 0;
	return DVAR_OK;
}

/* Write the whole chunks waiting in the staging buffers. */
static int flush_stage(dvar_writer *w, dvar_slice_entry *se)
{
	size_t n = w->stage_fill;
	/* Only the slice's last chunk can be short: pad it with zeros. */
	size_t last = w->stream_flushed + n - 1;
	uint64_t len = dvar_chunk_raw_len(se, last);
	memset(w->stage[n - 1] + len, 0, (size_t)(padded_len(len) - len));
	int rc = write_chunks(w, se, w->stream_flushed, n, NULL, w->stage);
	w->stream_flushed += n;
	w->stage_fill = 0;
	return rc;
}

int dvar_writer_write(dvar_writer *w, const void *data, size_t len)
{
	if (!w || (!data && len))
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_write: NULL argument");
	if (!w->stream.open)
		return dvar_error_set(DVAR_EINVAL, "writer for '%s': no slice is open "
		                      "(dvar_writer_begin_slice)", w->final_dir);
	dvar_var_entry *v = &w->vars[w->stream_var];
	dvar_slice_entry *se = &v->slices[v->num_slices];
	const unsigned char *p = data;
	if (dvar_stream_take(&w->stream, len))
		return fail_slice(w, w->stream_var);
	while (len) {
		size_t k = w->stage_fill;
		uint64_t clen = dvar_chunk_raw_len(se, w->stream_flushed + k);
		if (!w->stage[k] && !(w->stage[k] = dvar_page_alloc((size_t)se->chunk_size, 0))) {
			dvar_error_set(DVAR_ENOMEM, "out of memory (%llu bytes of staging buffer)",
			               (unsigned long long)se->chunk_size);
			return fail_slice(w, w->stream_var);
		}
		size_t n = clen - w->stage_pos < len ? (size_t)(clen - w->stage_pos) : len;
		memcpy(w->stage[k] + w->stage_pos, p, n);
		p += n;
		len -= n;
		w->stage_pos += n;
		if (w->stage_pos < clen)
			break;
		w->stage_pos = 0;
		w->stage_fill++;
		if ((w->stage_fill == w->stage_cap || w->stream_flushed + w->stage_fill == se->num_chunks) &&
		    flush_stage(w, se))
			return fail_slice(w, w->stream_var);
	}
	return DVAR_OK;
}

int dvar_writer_end_slice(dvar_writer *w)
{
	if (!w)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_end_slice: NULL writer");
	if (!w->stream.open)
		return dvar_error_set(DVAR_EINVAL, "writer for '%s': no slice is open "
		                      "(dvar_writer_begin_slice)", w->final_dir);
	if (dvar_stream_end(&w->stream))
		return fail_slice(w, w->stream_var);
	close_slice(w, w->stream_var);
	return DVAR_OK;
}

/* ------------------------------------------------------------ deltas */

/* The last component of a normalized path. */
static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

int dvar_writer_set_cancel(dvar_writer *w, const volatile sig_atomic_t *cancel)
{
	if (!w)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_set_cancel: NULL writer");
	w->cancel = cancel;
	return DVAR_OK;
}

int dvar_writer_set_base(dvar_writer *w, const char *base)
{
	dvar_read_options ro = DVAR_READ_OPTIONS_INIT;
	char *dir = NULL, *mine = NULL, *theirs = NULL, *a = NULL, *b = NULL;
	int rc;
	if (!w || !base)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_set_base: NULL argument");
	if ((rc = dvar_writer_check_usable(w)))
		return rc;
	if (w->base_dir || w->num_vars)
		return dvar_error_set(DVAR_EINVAL, "checkpoint '%s': the base is set before anything "
		                      "is added, once", w->final_dir);
	if ((rc = normalize_dir(base, &dir)))
		return rc;
	if (!(mine = dvar_path_parent(w->final_dir))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	/* The index names links by name alone: they live in the delta's directory.
	 * A bare name is one there. */
	if (!strchr(dir, '/')) {
		char *joined = dvar_path_join(mine, dir);
		free(dir);
		if (!(dir = joined)) {
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
			goto done;
		}
	} else if (!(theirs = dvar_path_parent(dir))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	if (theirs && (!(a = realpath(theirs, NULL)) || !(b = realpath(mine, NULL)) || strcmp(a, b))) {
		rc = dvar_error_set(DVAR_EINVAL, "base checkpoint '%s' must be in the directory of "
		                    "'%s'", dir, w->final_dir);
		goto done;
	}
	if (strcmp(base_name(dir), base_name(w->final_dir)) == 0 || strcmp(base_name(dir), ".") == 0 ||
	    strcmp(base_name(dir), "..") == 0) {
		rc = dvar_error_set(DVAR_EINVAL, "checkpoint '%s' cannot be the base of '%s'", dir,
		                    w->final_dir);
		goto done;
	}
	ro.threads = 1;
	if ((rc = dvar_chain_over(dir, &w->chain, &w->chain_len)) ||
	    (rc = dvar_reader_open(&w->base, dir, &ro)))
		goto done;
	w->base_dir = dir;
	dir = NULL;
done:
	if (rc) {
		dvar_links_free(w->chain, w->chain_len);
		w->chain = NULL;
		w->chain_len = 0;
	}
	free(dir);
	free(mine);
	free(theirs);
	free(a);
	free(b);
	return rc;
}

/* The base's variable name, which an unchanged or patched one must match. */
static int check_in_base(const dvar_writer *w, const char *name, int dtype, const dvar_shape *shape)
{
	dvar_var_info info;
	size_t i;
	if (!w->base)
		return dvar_error_set(DVAR_EINVAL, "variable '%s': checkpoint '%s' has no base to be "
		                      "a delta over (dvar_writer_set_base)", name, w->final_dir);
	if (dvar_reader_find(w->base, name, &i) != DVAR_OK)
		return dvar_error_set(DVAR_ENOTFOUND, "variable '%s' is not in the base checkpoint "
		                      "'%s'", name, w->base_dir);
	dvar_reader_var(w->base, i, &info);
	if (info.dtype != dtype || !dvar_shape_equal(&info.shape, shape)) {
		char s1[128], s2[128];
		dvar_shape_format(&info.shape, s1, sizeof(s1));
		dvar_shape_format(shape, s2, sizeof(s2));
		return dvar_error_set(DVAR_ESHAPE, "variable '%s' is %s %s in the base checkpoint '%s', "
		                      "not %s %s", name, dvar_dtype_name(info.dtype), s1, w->base_dir,
		                      dvar_dtype_name(dtype), s2);
	}
	return DVAR_OK;
}

int dvar_writer_add_unchanged(dvar_writer *w, const char *name, int dtype, const dvar_shape *full)
{
	dvar_var_entry *v;
	dvar_shape shape;
	int rc;
	if (!w || !full)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_add_unchanged: NULL argument");
	if ((rc = dvar_writer_check_usable(w)) || (rc = dvar_shape_init(&shape, full->rank, full->dims)))
		return rc;
	if (name && (rc = check_in_base(w, name, dtype, &shape)))
		return rc;
	return var_for(w, name, dtype, full, DVAR_DELTA_SAME, &shape, &v);
}

int dvar_writer_add_rows(dvar_writer *w, const char *name, int dtype, const dvar_shape *full,
                         const int64_t *rows, size_t n, const void *data)
{
	dvar_var_entry *v;
	dvar_shape shape;
	int rc;
	if (!w || !full || (n && !rows))
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_add_rows: NULL argument");
	if ((rc = dvar_writer_check_usable(w)) || (rc = dvar_shape_init(&shape, full->rank, full->dims)))
		return rc;
	if (name && shape.rank == 0)
		return dvar_error_set(DVAR_EINVAL, "variable '%s': a scalar has no rows; add it whole "
		                      "or unchanged", name);
	if (name && (rc = check_in_base(w, name, dtype, &shape)))
		return rc;
	for (size_t k = 0; name && k < n; k++)
		if (rows[k] < 0 || rows[k] >= shape.dims[0] || (k && rows[k] <= rows[k - 1]))
			return dvar_error_set(DVAR_EINVAL, "variable '%s': row %lld at position %zu is %s",
			                      name, (long long)rows[k], k,
			                      rows[k] < 0 || rows[k] >= shape.dims[0] ? "outside its rows" :
			                      "not above the row before it (rows go in increasing order, once)");
	if ((rc = var_for(w, name, dtype, full, DVAR_DELTA_ROWS, &shape, &v)))
		return rc;
	if (n == 0)
		return DVAR_OK;
	size_t esize = dvar_dtype_size(dtype);
	uint64_t row_elems = 1;
	for (int d = 1; d < shape.rank; d++)
		row_elems *= (uint64_t)shape.dims[d];
	if (!data && row_elems)
		return dvar_error_set(DVAR_EINVAL, "variable '%s': data is NULL", name);
	for (size_t k = 0; k < v->num_pieces; k++)
		if (rows[0] <= v->pieces[k].last_row && rows[n - 1] >= v->pieces[k].first_row)
			return dvar_error_set(DVAR_ESHAPE, "variable '%s': rows %lld..%lld overlap rows "
			                      "%lld..%lld added before", name, (long long)rows[0],
			                      (long long)rows[n - 1], (long long)v->pieces[k].first_row,
			                      (long long)v->pieces[k].last_row);
	dvar_piece *grown = dvar_grow(v->pieces, v->num_pieces, &v->cap_pieces, sizeof(*grown), 1);
	if (!grown)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	v->pieces = grown;
	dvar_piece *pc = &v->pieces[v->num_pieces];
	memset(pc, 0, sizeof(*pc));
	pc->first_row = rows[0];
	pc->last_row = rows[n - 1];
	pc->num_rows = n;
	dvar_slice ids = { .rank = 1, .length = { (int64_t)n } }, block = { .rank = shape.rank };
	for (int d = 0; d < shape.rank; d++)
		block.length[d] = d ? shape.dims[d] : (int64_t)n;
	if ((rc = layout_entry(w, &pc->ids, &ids, (uint64_t)n * 8)) ||
	    (rc = layout_entry(w, &pc->rows, &block, (uint64_t)n * row_elems * esize))) {
		dvar_piece_clear(pc);
		return rc;
	}
	/* The ids as the format stores them: int64, little-endian, as this host's are. */
	if ((rc = write_chunks(w, &pc->ids, 0, pc->ids.num_chunks, (const unsigned char *)rows, NULL)) ||
	    (rc = write_chunks(w, &pc->rows, 0, pc->rows.num_chunks, data, NULL))) {
		dvar_piece_clear(pc);
		w->broken = 1;
		return dvar_error_prefix("variable '%s'", name);
	}
	v->stored_bytes += compact_entry(&pc->ids) + compact_entry(&pc->rows);
	v->raw_bytes += pc->ids.raw_bytes + pc->rows.raw_bytes;
	v->num_pieces++;
	report_progress(w);
	return DVAR_OK;
}

int dvar_writer_set_attr(dvar_writer *w, const char *name, const char *key, const char *value)
{
	int rc;
	if (!w || !name || !key || !value)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_set_attr: NULL argument");
	if ((rc = dvar_writer_check_usable(w)))
		return rc;
	dvar_var_entry *v = find_var(w, name);
	if (!v)
		return dvar_error_set(DVAR_ENOTFOUND, "variable '%s' has not been added to '%s'; "
		                      "add it before setting its attributes", name, w->final_dir);
	if ((rc = dvar_var_set_attr(v, key, value)))
		return dvar_error_prefix("variable '%s'", name);
	return DVAR_OK;
}

uint64_t dvar_writer_data_bytes(const dvar_writer *w)
{
	return w ? atomic_load(&w->next_offset) + padded_len(w->pack_fill) : 0;
}

void dvar_writer_free(dvar_writer *w)
{
	if (!w)
		return;
	dvar_pool_free(w->pool);
	if (w->fd >= 0)
		close(w->fd);
	if (w->fd_direct >= 0)
		close(w->fd_direct);
	if (w->lock_fd >= 0)
		close(w->lock_fd);
	if (w->tmp_dir && !w->shared) {
		/* Keep the caller's error: cleanup failures are secondary. */
		dvar_error saved = *dvar_error_last();
		char msg[DVAR_ERROR_MESSAGE_MAX];
		snprintf(msg, sizeof(msg), "%s", saved.message);
		dvar_fs_rmtree(w->tmp_dir);
		dvar_error_restore(saved.code, msg);
	}
	if (w->stream.open) /* the reserved entry of a slice never ended */
		dvar_slice_entry_clear(&w->vars[w->stream_var].slices[w->vars[w->stream_var].num_slices]);
	for (size_t i = 0; i < w->num_vars; i++)
		dvar_var_entry_clear(&w->vars[i]);
	dvar_reader_free(w->base);
	dvar_links_free(w->chain, w->chain_len);
	free(w->base_dir);
	for (size_t k = 0; w->stage && k < w->stage_cap; k++)
		free(w->stage[k]);
	free(w->stage);
	free(w->pack);
	free(w->pack_chunks);
	dvar_stash_free(w->buffers, free);
	free(w->vars);
	free(w->table);
	free(w->tmp_dir);
	free(w->data_path);
	free(w->data_shown);
	free(w->final_dir);
	free(w->root);
	free(w->step_name);
	free(w);
}
