/*
 * dvar/format.h - the on-disk checkpoint: writing one (whole tensors or
 * streamed pieces), reading any slice of it back, mapping raw slices in
 * place, verifying it, and the checkpoint root (ckpt-<step>/ directories
 * plus the `checkpoint` pointer file). docs/FORMAT.md gives the bytes.
 *
 * A checkpoint is a directory holding an `index` (an immutable LevelDB table)
 * and data files `data-0000w-of-0000W`. It is written into a temporary sibling
 * directory and renamed into place by dvar_writer_commit, so a reader never
 * sees a partial checkpoint.
 *
 * Several processes sharing a file system can write one checkpoint together:
 * each opens a part writer (dvar_writer_open_part), writes its own data file
 * and hands its entries (dvar_writer_finish_part) to one chief, which checks
 * them all and commits (dvar_writer_commit_parts). The single-process calls
 * are the one-part case of the same code.
 */
#ifndef DVAR_FORMAT_H
#define DVAR_FORMAT_H

#include <signal.h>

#include "common.h"
#include "core.h"

DVAR_BEGIN_DECL

/* ------------------------------------------------------------------ writer */

/** How chunks are stored. */
typedef enum {
	/** lz4 where a cheap sample says it saves >= 10% and runs faster than
	 *  the disk writes (see FORMAT.md); raw otherwise. */
	DVAR_COMPRESS_AUTO = 0,
	/** raw always (page-aligned, zero-copy readable). */
	DVAR_COMPRESS_NONE = 1,
	/** lz4 wherever it saves >= 10%, however slow. */
	DVAR_COMPRESS_LZ4 = 2
} dvar_compress;

/** Writer flags. */
#define DVAR_WRITE_NO_DIRECT_IO (1u << 0) /**< buffered writes, never O_DIRECT */
#define DVAR_WRITE_NO_FSYNC (1u << 1)     /**< skip fsync (tests, scratch data) */
#define DVAR_WRITE_PAGE_ALIGN (1u << 2)   /**< every slice page-aligned, small ones
                                               too (a serving export); readers of
                                               format 2 and 3 read it too */

#define DVAR_DEFAULT_CHUNK_SIZE (4u << 20)

typedef struct {
	unsigned int version;   /**< DVAR_WRITE_OPTIONS_VERSION */
	uint64_t chunk_size;    /**< raw bytes per chunk; 0 = 4 MiB. A multiple of
	                             4096 from 4096 to 1 GiB. */
	dvar_compress compress; /**< default DVAR_COMPRESS_AUTO */
	int threads;            /**< compression/checksum/write threads; 0 = the CPUs and
	                             4 more (4 O_DIRECT writes in flight while every CPU
	                             checksums) */
	uint32_t flags;         /**< DVAR_WRITE_* */
	int keep_last;          /**< dvar_writer_open_step: keep this many; 0 = all */
	dvar_progress_fn progress;
	void *progress_userdata;
} dvar_write_options;

#define DVAR_WRITE_OPTIONS_VERSION 1
#define DVAR_WRITE_OPTIONS_INIT { DVAR_WRITE_OPTIONS_VERSION }

/**
 * Set *opts to DVAR_WRITE_OPTIONS_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_write_options_init(dvar_write_options *opts, unsigned int version);

typedef struct dvar_writer dvar_writer;

/**
 * Start writing a checkpoint that will appear at dir when committed. Nothing
 * appears at dir before dvar_writer_commit succeeds: the files go to a
 * temporary sibling of dir named for this process (docs/FORMAT.md,
 * "Temporary names"), removed again when the writer is freed uncommitted.
 * Opening removes the temporary files and directories that writers which
 * died on this host left next to dir.
 * @param out   the writer; the caller frees it with dvar_writer_free
 * @param dir   the checkpoint directory; DVAR_EEXISTS if it exists already
 * @param opts  NULL for defaults
 */
DVAR_EXTERN(int) dvar_writer_open(dvar_writer **out, const char *dir,
                                  const dvar_write_options *opts);

/**
 * Start writing step's checkpoint under a checkpoint root: it will be
 * root/ckpt-<step>, and committing it also makes it the root's latest (the
 * `checkpoint` pointer file) and deletes the checkpoints beyond
 * opts->keep_last. The root is created when missing. DVAR_EEXISTS when the
 * pointer file lists ckpt-<step>; one it does not list (left by a save of
 * that step that failed between its commit's rename and the pointer file)
 * is deleted, and this save replaces it.
 */
DVAR_EXTERN(int) dvar_writer_open_step(dvar_writer **out, const char *root, int64_t step,
                                       const dvar_write_options *opts);

/**
 * Save a variable, or one slice of it. The bytes are written before the call
 * returns (chunked, checksummed, compressed and written in parallel).
 * @param name   the variable's name: 1..1024 bytes, no NUL
 * @param dtype  a dvar_dtype
 * @param full   the variable's full shape
 * @param slice  the part data holds; NULL for all of it. Slices of one
 *               variable must not overlap and must agree on dtype and shape.
 * @param data   the slice's elements, row-major; borrowed for the call
 */
DVAR_EXTERN(int) dvar_writer_add(dvar_writer *w, const char *name, int dtype,
                                 const dvar_shape *full, const dvar_slice *slice,
                                 const void *data);

/** One variable or slice of dvar_writer_add_many: as dvar_writer_add's arguments. */
typedef struct dvar_write_request {
	const char *name;
	int dtype;
	const dvar_shape *full;
	const dvar_slice *slice; /* NULL for all of it */
	const void *data;        /* borrowed for the call */
} dvar_write_request;

/**
 * n adds, each as dvar_writer_add would do it, in order, with the chunks of
 * all of them written together: many variables of a few chunks each are
 * saved as fast as one large one, where one add at a time would wait for
 * each in turn (one chunk: one write in flight). The bytes are written
 * before the call returns. A request that fails its checks (name, dtype,
 * shape, slice) returns that error, naming its variable, with the requests
 * before it added and the writer usable, as the same dvar_writer_add calls
 * would leave it; a failed write leaves the writer unusable. Several slices
 * of one variable may be in one call; they are written one group after the
 * other.
 */
DVAR_EXTERN(int) dvar_writer_add_many(dvar_writer *w, const dvar_write_request *reqs, size_t n);

/*
 * Streamed slices: the same as dvar_writer_add, for data that arrives in
 * pieces (read from another checkpoint, received from the network, ...):
 *
 *     dvar_writer_begin_slice(w, "emb", DVAR_FLOAT32, &full, &rows);
 *     while (more)
 *         dvar_writer_write(w, piece, piece_bytes);   any sizes, in order
 *     dvar_writer_end_slice(w);
 *
 * The writer holds at most `threads` chunks of the slice (one staging
 * buffer of chunk_size bytes per pool thread, reused for every streamed
 * slice until dvar_writer_free) plus its usual per-thread chunk buffers,
 * whatever the slice's size. The bytes are chunked, checksummed, compressed
 * and written exactly as dvar_writer_add would write the whole buffer: with
 * DVAR_COMPRESS_NONE, or with one thread, the data file and the index come
 * out byte for byte the same (with several threads lz4 chunks land in the
 * order they finish, as in dvar_writer_add; DVAR_COMPRESS_AUTO's choice
 * depends on a speed test). While a slice is open the writer accepts only
 * dvar_writer_write, dvar_writer_end_slice and dvar_writer_free (anything
 * else is DVAR_EINVAL). A failed write or end leaves the writer unusable:
 * nothing can be committed any more, free it.
 */

/**
 * Open a slice whose data will come through dvar_writer_write: the
 * arguments and checks are dvar_writer_add's (slice NULL = the whole
 * variable). The variable counts as added from here on.
 */
DVAR_EXTERN(int) dvar_writer_begin_slice(dvar_writer *w, const char *name, int dtype,
                                         const dvar_shape *full, const dvar_slice *slice);

/**
 * The next len bytes of the open slice's elements (row-major within the
 * slice, as dvar_writer_add takes them), in any piece sizes, element
 * boundaries included. data is borrowed for the call; the chunks it
 * completes are written before the call returns.
 * @return DVAR_EINVAL when no slice is open, or when the pieces so far add
 *         up to more than the slice's bytes (the slice is then abandoned).
 */
DVAR_EXTERN(int) dvar_writer_write(dvar_writer *w, const void *data, size_t len);

/**
 * Close the open slice: it is saved from here on.
 * @return DVAR_EINVAL when no slice is open, or when fewer bytes than the
 *         slice holds were written (naming both counts).
 */
DVAR_EXTERN(int) dvar_writer_end_slice(dvar_writer *w);

/**
 * Finish: write the index, fsync every file and the directory, rename the
 * temporary directory to its final name (and, for dvar_writer_open_step,
 * update the pointer file and apply retention). After a failure nothing is
 * committed and the temporary directory is removed.
 */
DVAR_EXTERN(int) dvar_writer_commit(dvar_writer *w);

/**
 * Free the writer. NULL is a no-op. A writer from dvar_writer_open or
 * dvar_writer_open_step discards its uncommitted checkpoint; a part writer
 * leaves the shared staging directory alone (dvar_writer_abort_parts
 * removes it).
 */
DVAR_EXTERN(void) dvar_writer_free(dvar_writer *w);

/**
 * Stop the writer when *cancel becomes non-zero (a signal handler may set
 * it; NULL: never). Every call that writes data checks it before each
 * chunk it writes, so a Ctrl-C stops even one dvar_writer_add_many of many
 * gigabytes within a chunk per thread: that call returns DVAR_ECANCELED
 * and the writer is unusable; dvar_writer_commit returns DVAR_ECANCELED
 * once *cancel is set, and nothing is committed (dvar_writer_free removes
 * what was written). The flag is borrowed until the writer is freed.
 */
DVAR_EXTERN(int) dvar_writer_set_cancel(dvar_writer *w, const volatile sig_atomic_t *cancel);

/*
 * Deltas (docs/FORMAT.md, "Deltas"): a checkpoint that stores only what
 * changed since an earlier one of the same directory, its base. Every
 * variable of a delta is added whole (dvar_writer_add, as in any
 * checkpoint), unchanged (the base's value), or as the rows that changed
 * (the base's value with those rows replaced). A reader presents a delta's
 * variables exactly as a full checkpoint would; it needs every checkpoint
 * of the chain below it (the base, the base's base, ..., down to a full
 * one) and refuses one that is missing or not the checkpoint the delta was
 * written over. A delta is format version 3, which readers of version 2
 * refuse.
 */

/**
 * Make the checkpoint being written a delta over base: a committed
 * checkpoint in the same directory (a path, or its name there), before
 * anything is added. The base and its whole chain are opened and checked
 * here; the writer keeps the base open until it is freed. A delta may be
 * the base of the next one, up to chains of 1000 links. In a checkpoint
 * written by several parts every part sets the same base.
 * @return DVAR_EINVAL for a base elsewhere, the checkpoint itself, a call
 *         after an add or a second call; the base's open errors otherwise
 *         (DVAR_ENOTFOUND, DVAR_ECORRUPT, ...), naming it.
 */
DVAR_EXTERN(int) dvar_writer_set_base(dvar_writer *w, const char *base);

/**
 * Add a variable of a delta that has not changed since the base: it reads
 * as the base's, which must hold it with this dtype and shape.
 * @return DVAR_ENOTFOUND when the base lacks it, DVAR_ESHAPE when the base's
 *         dtype or shape differ, DVAR_EINVAL without a base or when the
 *         variable was added already.
 */
DVAR_EXTERN(int) dvar_writer_add_unchanged(dvar_writer *w, const char *name, int dtype,
                                           const dvar_shape *full);

/**
 * Add rows of a variable of a delta (rank 1 or more) that changed since the
 * base: rows[0..n) are their indices along axis 0, increasing, and data
 * holds the n rows (each the full shape without axis 0), row-major. The
 * variable reads as the base's with these rows replaced. Several calls for
 * one variable (one per shard, say; or one per part) add rows that must not
 * interleave with earlier calls' (each call's rows lie outside the range
 * from the first to the last row of every earlier one). n = 0 adds the
 * variable with no changed rows. The ids and rows are written (chunked,
 * checksummed, compressed as any slice) before the call returns.
 * @return DVAR_EINVAL for rows out of order or range, no base, or a variable
 *         added otherwise; DVAR_ESHAPE for interleaving calls or a base
 *         whose variable differs; DVAR_ENOTFOUND when the base lacks it.
 */
DVAR_EXTERN(int) dvar_writer_add_rows(dvar_writer *w, const char *name, int dtype,
                                      const dvar_shape *full, const int64_t *rows, size_t n,
                                      const void *data);

/* Attributes: string key/value pairs per variable ("kind" = "mirrored"). */
#define DVAR_ATTR_KEY_MAX 64      /**< key bytes: 1..64, no NUL */
#define DVAR_ATTR_VALUE_MAX 4096  /**< value bytes: 0..4096, no NUL */
#define DVAR_ATTRS_MAX 64         /**< attributes per variable */

/**
 * Set an attribute of a variable this writer has added (at least one slice
 * of it); setting a key again replaces its value. Attributes are kept in key
 * order. In a checkpoint written by several parts, every part that adds the
 * variable must set the same attributes (dvar_writer_commit_parts checks).
 * @return DVAR_ENOTFOUND when name was not added by this writer; DVAR_EINVAL
 *         for a key or value out of bounds or a 65th attribute.
 */
DVAR_EXTERN(int) dvar_writer_set_attr(dvar_writer *w, const char *name, const char *key,
                                      const char *value);

/* ------------------------------------------------------------ part writers */

/** A token names one save: 1..64 characters of [A-Za-z0-9_-]. */
#define DVAR_TOKEN_MAX 64

/**
 * Start writing part `part` of `nparts` of the checkpoint that will appear at
 * dir. Every part writes its own data file `data-<part>-of-<nparts>` into one
 * staging directory, the hidden sibling `.<name>.dvartmp-<token>` of dir,
 * which the first part to get there creates. A token of the form
 * `<host>-<pid>-<random>` (docs/FORMAT.md, "Temporary names"; dvar_save's
 * are its chief's) lets the next writer remove the staging directory once
 * that process is gone; with any other token only dvar_writer_abort_parts
 * removes it. All parts of one save pass the same
 * dir, token and nparts; the token (e.g. random hex agreed on by the
 * processes) must be new for every save. Slices added are recorded with file
 * id = part.
 * @return DVAR_EEXISTS if dir exists, or if this part's data file does
 *         (the part was opened twice, or a failed save with the same token
 *         was not aborted).
 */
DVAR_EXTERN(int) dvar_writer_open_part(dvar_writer **out, const char *dir, const char *token,
                                       int part, int nparts, const dvar_write_options *opts);

/** Like dvar_writer_open_part for root/ckpt-<step> (see dvar_writer_open_step). */
DVAR_EXTERN(int) dvar_writer_open_step_part(dvar_writer **out, const char *root, int64_t step,
                                            const char *token, int part, int nparts,
                                            const dvar_write_options *opts);

/**
 * Finish this part: flush and fsync its data file (unless
 * DVAR_WRITE_NO_FSYNC) and return its entries: the variables and slices it
 * wrote and its data file size, encoded as docs/FORMAT.md's "part entries".
 * Afterwards only dvar_writer_commit_parts (on the chief) and
 * dvar_writer_free are allowed.
 * @param entries  a blob the caller releases with dvar_free
 */
DVAR_EXTERN(int) dvar_writer_finish_part(dvar_writer *w, void **entries, size_t *len);

/**
 * Commit a checkpoint written by several parts, on one finished part (the
 * chief), given the entries of all n = nparts parts (its own among them, in
 * any order). Checks that every part is there exactly once and belongs to
 * this save; that every part declaring a variable gives the same dtype, full
 * shape and attributes; that no two slices of a variable overlap; that every
 * data file is present with the size its part says. Then it writes the
 * index, fsyncs, renames the staging directory into place (never replacing
 * anything) and, under a root, publishes the pointer file and applies
 * keep_last, as dvar_writer_commit does.
 * @return DVAR_ECORRUPT for damaged entries or a data file of the wrong
 *         size, DVAR_ENOTFOUND for a missing data file, DVAR_ESHAPE for
 *         dtype/shape disagreements or overlaps, DVAR_EINVAL for missing,
 *         duplicate or foreign parts and attribute disagreements. On failure
 *         nothing is committed and the pointer file is unchanged; the staging
 *         directory stays for dvar_writer_abort_parts.
 */
DVAR_EXTERN(int) dvar_writer_commit_parts(dvar_writer *w, const void *const *entries,
                                          const size_t *lens, int n);

/**
 * Remove the staging directory of a failed save of dir with token. Any
 * process may call it, any number of times; call it once no part writes any
 * more. It never touches a committed checkpoint or the pointer file.
 */
DVAR_EXTERN(int) dvar_writer_abort_parts(const char *dir, const char *token);

/** dvar_writer_abort_parts for root/ckpt-<step>. */
DVAR_EXTERN(int) dvar_writer_abort_step_parts(const char *root, int64_t step, const char *token);

/* ------------------------------------------------------------------ reader */

typedef struct {
	unsigned int version; /**< DVAR_READ_OPTIONS_VERSION */
	int threads;          /**< read/decompress threads; 0 = the CPUs, and 4 more for
	                           reads that go around the page cache (4 in flight while
	                           every CPU checksums) */
	dvar_progress_fn progress;
	void *progress_userdata;
	unsigned int flags; /**< version 2: DVAR_READ_* */
} dvar_read_options;

/**
 * Read through the page cache even what is not in it yet. By default the
 * middle of a chunk of 1 MiB or more that is not cached, read while other
 * reads are in flight, goes from the disk straight to the destination
 * (O_DIRECT): as fast as the disk, evicting nothing other programs keep
 * cached, and leaving nothing cached either. With this flag it is cached,
 * so that reading the same bytes again, in this process or another, is a
 * copy from memory (a tensor read over and over, a server that restarts).
 */
#define DVAR_READ_CACHED (1u << 0)

#define DVAR_READ_OPTIONS_VERSION 2
#define DVAR_READ_OPTIONS_INIT { DVAR_READ_OPTIONS_VERSION }

/**
 * Set *opts to DVAR_READ_OPTIONS_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_read_options_init(dvar_read_options *opts, unsigned int version);

/** What the index says of one variable. Strings are borrowed from the reader. */
typedef struct {
	const char *name;
	int dtype;
	dvar_shape shape;
	size_t num_slices;     /**< slices saved */
	uint64_t raw_bytes;    /**< bytes of the saved slices, uncompressed */
	uint64_t stored_bytes; /**< bytes they take in the data files */
	size_t num_chunks;
} dvar_var_info;

typedef struct dvar_reader dvar_reader;

/**
 * Open a checkpoint for reading, read-only (several processes may read one
 * checkpoint at once).
 * @param path  a checkpoint directory, or a root holding a `checkpoint`
 *              pointer file (then its latest checkpoint); or a TensorFlow
 *              checkpoint (TensorBundle): its prefix (".../model.ckpt-100",
 *              ".../variables/variables"), its index file
 *              (".../model.ckpt-100.index"), a directory whose TF
 *              `checkpoint` state file names it, a SavedModel directory
 *              (its variables/variables), or a directory holding one
 *              prefix (a SavedModel's variables/; several are DVAR_EINVAL
 *              naming them). A root whose pointer names a checkpoint that is
 *              gone is DVAR_ENOTFOUND naming the ones it holds.
 *              docs/FORMAT.md, "TensorFlow checkpoints", says how one reads
 *              as a dvar checkpoint.
 */
DVAR_EXTERN(int) dvar_reader_open(dvar_reader **out, const char *path,
                                  const dvar_read_options *opts);

/** Free the reader. NULL is a no-op. */
DVAR_EXTERN(void) dvar_reader_free(dvar_reader *r);

/** The checkpoint directory the reader opened, or a TensorFlow checkpoint's prefix (borrowed). */
DVAR_EXTERN(const char *) dvar_reader_path(const dvar_reader *r);

/** Number of variables, which are indexed 0..n-1 in name order. */
DVAR_EXTERN(size_t) dvar_reader_num_vars(const dvar_reader *r);

/** Describe variable i. */
DVAR_EXTERN(int) dvar_reader_var(const dvar_reader *r, size_t i, dvar_var_info *out);

/** Find a variable by name; DVAR_ENOTFOUND (naming it) when absent. */
DVAR_EXTERN(int) dvar_reader_find(const dvar_reader *r, const char *name, size_t *out);

/** Number of attributes of variable i (0 when i is out of range). */
DVAR_EXTERN(size_t) dvar_reader_var_num_attrs(const dvar_reader *r, size_t i);

/** Attribute k of variable i, in key order (strings borrowed from the reader). */
DVAR_EXTERN(int) dvar_reader_var_attr_at(const dvar_reader *r, size_t i, size_t k,
                                         const char **key, const char **value);

/**
 * The value of variable i's attribute key (borrowed from the reader).
 * @return DVAR_ENOTFOUND when the variable has no such attribute
 */
DVAR_EXTERN(int) dvar_reader_var_attr(const dvar_reader *r, size_t i, const char *key,
                                      const char **value);

/** The j-th saved slice of variable i. */
DVAR_EXTERN(int) dvar_reader_var_slice(const dvar_reader *r, size_t i, size_t j,
                                       dvar_slice *out);

/**
 * Read any hyperrectangle of variable i into dst (row-major), assembled from
 * whatever slices were saved, reading only the chunks (and, for raw chunks,
 * only the 64 KiB blocks) it needs and verifying each one's checksum.
 * A TensorFlow tensor has one checksum over all of it: a read of part of
 * it reads only the bytes from the part's first element to its last and
 * cannot check them; a read covering the whole tensor (or saved slice)
 * checks it, as dvar_reader_verify does, and so does a run of reads that
 * covers it in order, part after part (a tensor walked in pieces).
 * Large reads of data not in the page cache go around it (see
 * DVAR_READ_CACHED): straight from the disk into a dst placed within its
 * 4 KiB pages as the bytes are in the file's (for a whole dvar variable, a
 * dst on a page), through a buffer of the reader's, a memcpy more, into
 * any other.
 * @param slice      NULL for the whole variable
 * @param dst_bytes  the size of dst; must equal the slice's byte count
 * @return DVAR_ECORRUPT naming the chunk and its file when a checksum
 *         fails, the data file is missing or is shorter than the index
 *         says; DVAR_EIO naming the file when it cannot be opened or read
 *         (a read cut short or interrupted by a signal is made again).
 * One read at a time per reader.
 */
DVAR_EXTERN(int) dvar_reader_read(dvar_reader *r, size_t i, const dvar_slice *slice,
                                  void *dst, size_t dst_bytes);

/** One read of dvar_reader_read_many: as dvar_reader_read's arguments. */
typedef struct dvar_read_request {
	size_t var;              /* the variable's index */
	const dvar_slice *slice; /* NULL for the whole variable */
	void *dst;
	size_t dst_bytes;
} dvar_read_request;

/**
 * n reads, each as dvar_reader_read would do it, with the reads of all of
 * them in flight together: many small variables read as fast as one large
 * one, where one read at a time would wait for each in turn. Every request
 * is checked before anything is read; on failure the first error found is
 * returned (naming its variable) and the destinations hold nothing
 * reliable. Destinations must not overlap. One call at a time per reader.
 */
DVAR_EXTERN(int) dvar_reader_read_many(dvar_reader *r, const dvar_read_request *reqs, size_t n);

/**
 * dvar_var_info.dtype of a TensorFlow string tensor (DT_STRING), which a
 * TensorBundle may hold (the object graph, vocabularies). Not a dvar_dtype:
 * dvar_dtype_size and dvar_dtype_name know nothing of it; dvar_reader_read
 * refuses it (DVAR_ENOTSUPP, saying to use dvar_reader_read_strings).
 */
#define DVAR_DTYPE_STRING 7

/**
 * Read string tensor i (dtype DVAR_DTYPE_STRING) whole, every checksum
 * verified: the byte length of each of its n elements (n = the shape's
 * element count, else DVAR_ESHAPE) into lens, and their bytes, one after
 * the other, into bytes, which holds cap bytes. *total receives the sum of
 * the lengths; call with bytes NULL to learn it (DVAR_ESHAPE when cap is
 * smaller), or give cap = dvar_var_info.stored_bytes, which always holds
 * them, to read the tensor once.
 */
DVAR_EXTERN(int) dvar_reader_read_strings(dvar_reader *r, size_t i, uint64_t *lens, uint64_t n,
                                          void *bytes, size_t cap, uint64_t *total);

/**
 * dvar_reader_read_strings into buffers allocated here: *lens receives the
 * byte length of each element (as many as the shape has), *bytes the
 * elements one after the other (*total bytes, then a 0 byte). Both are the
 * caller's, freed with dvar_free; both are NULL after a failure.
 * @param total  NULL when not wanted
 */
DVAR_EXTERN(int) dvar_reader_read_strings_alloc(dvar_reader *r, size_t i, uint64_t **lens,
                                                char **bytes, uint64_t *total);

/* Mapping: zero-copy access to raw data, for serving. docs/FORMAT.md, "Mapping". */

/** dvar_reader_map flags. */
#define DVAR_MAP_VERIFY (1u << 0) /**< check every checksum of the bytes before returning */

/** dvar_reader_map's j for the whole variable (saved as one slice covering it). */
#define DVAR_MAP_WHOLE ((size_t)-1)

/**
 * A read-only mapping of a saved slice's bytes. Filled by dvar_reader_map,
 * released by dvar_reader_unmap; the fields ending in _ are the mapping's
 * own. A zeroed struct is an empty mapping (unmapping it is a no-op).
 */
typedef struct {
	const void *data; /**< the elements, row-major, little-endian; NULL when size is 0 */
	size_t size;      /**< bytes at data: the slice's byte count */
	void *base_;
	size_t length_;
} dvar_mapping;

/**
 * Map saved slice j of variable i (DVAR_MAP_WHOLE: the variable, which
 * must then be saved as one slice covering its shape) read-only from its
 * data file, and point out->data at its bytes: no copy, no read until the
 * pages are touched. Only a slice whose chunks are all raw and lie
 * back to back in chunk order in its data file can be mapped; a
 * checkpoint written with DVAR_COMPRESS_NONE (as `dvar export
 * --single-shard` writes) has only such slices.
 * @param flags  DVAR_MAP_VERIFY: read every byte once through the page
 *               cache and check the block and chunk checksums first
 *               (DVAR_ECORRUPT naming the chunk when one fails, DVAR_EIO
 *               naming the file when it cannot be read). Without it
 *               nothing is checked: the bytes are what the file holds.
 * @return DVAR_ENOTSUPP saying why when the slice cannot be mapped (a
 *         compressed chunk, chunks out of order, several slices for
 *         DVAR_MAP_WHOLE, any tensor of a TensorFlow checkpoint: not
 *         page-aligned); DVAR_ECORRUPT when the data file is missing or
 *         shorter than the index says, DVAR_EIO when it cannot be opened;
 *         DVAR_EINVAL for i or j out of range.
 * The mapping stays valid after dvar_reader_free until dvar_reader_unmap.
 * As with any mapping, a data file truncated by someone else meanwhile makes
 * touching the lost pages fault (SIGBUS).
 */
DVAR_EXTERN(int) dvar_reader_map(dvar_reader *r, size_t i, size_t j, uint32_t flags,
                                 dvar_mapping *out);

/** Release a mapping and zero *m. NULL, or an empty mapping, is a no-op. */
DVAR_EXTERN(void) dvar_reader_unmap(dvar_mapping *m);

/**
 * A checkpoint's chain (docs/FORMAT.md, "Deltas"): link 0 is the
 * checkpoint opened, link 1 its base when it is a delta, and so on down to
 * a full checkpoint (a checkpoint that is not a delta has one link).
 * Strings are borrowed from the reader.
 */
typedef struct {
	const char *path;       /**< the link's checkpoint directory */
	int is_delta;           /**< 1 when it is a delta over the next link */
	uint64_t bytes;         /**< its data files' bytes */
	size_t vars_whole;      /**< variables it saves whole */
	size_t vars_unchanged;  /**< variables it leaves as the next link has them */
	size_t vars_patched;    /**< variables it saves changed rows of */
} dvar_link_info;

DVAR_EXTERN(size_t) dvar_reader_num_links(const dvar_reader *r);
DVAR_EXTERN(int) dvar_reader_link(const dvar_reader *r, size_t k, dvar_link_info *out);

/** How a delta holds a variable (dvar_var_delta.kind). */
#define DVAR_DELTA_FULL 0      /**< its value is saved here (any checkpoint's variables) */
#define DVAR_DELTA_UNCHANGED 1 /**< as the base has it */
#define DVAR_DELTA_PATCHED 2   /**< the base's with rows replaced */

/** What checkpoint link 0 itself saves of a variable. */
typedef struct {
	int kind;              /**< DVAR_DELTA_* */
	uint64_t rows;         /**< PATCHED: rows replaced */
	uint64_t raw_bytes;    /**< bytes it saves of it here (ids and rows of a patch) */
	uint64_t stored_bytes; /**< the same, as stored */
} dvar_var_delta;

DVAR_EXTERN(int) dvar_reader_var_delta(const dvar_reader *r, size_t i, dvar_var_delta *out);

/** Bytes this reader has read from data files so far. */
DVAR_EXTERN(uint64_t) dvar_reader_bytes_read(const dvar_reader *r);

/** One corrupt chunk found by dvar_reader_verify (strings borrowed for the call). */
typedef struct {
	const char *var;   /**< variable name */
	const char *file;  /**< data file path */
	uint64_t offset;   /**< the chunk's offset in the file */
	uint64_t chunk;    /**< chunk number within its slice */
	int code;          /**< DVAR_ECORRUPT, DVAR_EIO, ... */
	const char *message; /**< what is wrong ("checksum mismatch in block 2 ...") */
} dvar_bad_chunk;

typedef void (*dvar_bad_chunk_fn)(void *userdata, const dvar_bad_chunk *bad);

/**
 * Read every chunk of every variable and check every checksum, calling bad
 * for each chunk that fails.
 * @param num_bad  the number of bad chunks found (may be NULL)
 * @return DVAR_OK when every chunk checked (num_bad tells whether any were
 *         bad); an error only when the walk itself could not proceed.
 */
DVAR_EXTERN(int) dvar_reader_verify(dvar_reader *r, dvar_bad_chunk_fn bad, void *userdata,
                                    uint64_t *num_bad);

/* -------------------------------------------------------------------- root */

/** One checkpoint under a root. Strings are borrowed from the listing. */
typedef struct {
	const char *name;  /**< directory name, "ckpt-100" */
	int64_t step;      /**< -1 when the name carries no step */
	uint64_t bytes;    /**< bytes of its files */
	int is_latest;     /**< the pointer file names it */
	int is_kept;       /**< the pointer file lists it */
	const char *base;  /**< a delta's base (a checkpoint of the root); NULL for a full one */
} dvar_root_entry;

typedef struct dvar_root_list dvar_root_list;

/**
 * What a writer left under a root when it died before committing: a hidden
 * temporary file or directory named by docs/FORMAT.md's "Temporary names"
 * rule. The next writer into the root removes those whose writer is gone
 * (this host, process no longer running). Strings are borrowed from the
 * listing.
 */
typedef struct {
	const char *name;   /**< its name in the root (".ckpt-200.dvartmp-node1-4242-...") */
	const char *target; /**< what it would have become ("ckpt-200", "checkpoint") */
	const char *host;   /**< its writer's host; "" when its name does not say */
	int64_t pid;        /**< its writer's process id; 0 when its name does not say */
	uint64_t bytes;     /**< bytes of its files (a directory: the files in it) */
	int writer_alive;   /**< 1 runs, 0 gone (the next writer removes it), -1 cannot tell
	                         (another host, or a multi-part save's own token) */
} dvar_root_leftover;

/**
 * List the committed checkpoints under root (directories holding an index),
 * in step order, marked with what the pointer file says, and the leftovers
 * of writers that did not commit (dvar_root_list_leftover), in name order.
 */
DVAR_EXTERN(int) dvar_root_list_open(dvar_root_list **out, const char *root);
DVAR_EXTERN(size_t) dvar_root_list_count(const dvar_root_list *l);
DVAR_EXTERN(int) dvar_root_list_get(const dvar_root_list *l, size_t i, dvar_root_entry *out);
DVAR_EXTERN(size_t) dvar_root_list_num_leftovers(const dvar_root_list *l);
DVAR_EXTERN(int) dvar_root_list_leftover(const dvar_root_list *l, size_t i,
                                         dvar_root_leftover *out);
DVAR_EXTERN(void) dvar_root_list_free(dvar_root_list *l);

/**
 * TensorFlow's `checkpoint` state file (CheckpointState in text format),
 * which tf.train.CheckpointManager and tf.train.Saver write next to their
 * checkpoints, and which a dvar root's pointer file is too. Paths are as
 * written: a relative one is relative to the directory holding the file.
 */
typedef struct {
	char *latest;   /**< model_checkpoint_path: never NULL or empty once read */
	char **all;     /**< all_model_checkpoint_paths, in order */
	size_t num_all;
} dvar_checkpoint_state;

/**
 * Read dir/checkpoint, accepting what TensorFlow's text-format parser
 * accepts for a CheckpointState: fields in any order (the last
 * model_checkpoint_path wins), `#` comments, any whitespace, ',' or ';'
 * after a value, list values ([...]) of the repeated fields, strings in
 * either quote with C escapes and adjacent strings joined; the timestamps
 * are parsed and ignored. The caller frees *out with
 * dvar_checkpoint_state_clear.
 * @return DVAR_ENOTFOUND when dir has no such file; DVAR_ECORRUPT naming
 *         the file and line for what TensorFlow would refuse (an unknown
 *         field, a malformed value) and for a state without
 *         model_checkpoint_path; DVAR_EIO. On failure *out is empty.
 */
DVAR_EXTERN(int) dvar_checkpoint_state_read(dvar_checkpoint_state *out, const char *dir);
DVAR_EXTERN(void) dvar_checkpoint_state_clear(dvar_checkpoint_state *s);

/* ------------------------- TensorFlow checkpoints (TensorBundle) - writing */

/*
 * A TensorFlow V2 checkpoint (TensorBundle) that tf.train.load_checkpoint,
 * tf.train.Checkpoint.restore and every TensorBundle reader accept:
 * PREFIX.index (a LevelDB table: the header, then one entry per key) and
 * one data file PREFIX.data-00000-of-00001 (the tensors back to back).
 * The bytes are TensorFlow's BundleWriter's for the same calls: header,
 * entry encoding, table layout, masked CRC-32C checksums; docs/FORMAT.md,
 * "Writing TensorFlow checkpoints".
 *
 *     dvar_tf_writer_open(&w, "export/model.ckpt", NULL);
 *     dvar_tf_writer_begin(w, "emb/.ATTRIBUTES/VARIABLE_VALUE", DVAR_FLOAT32, &full, &rows);
 *     while (more)
 *         dvar_tf_writer_write(w, piece, piece_bytes);   any sizes, in order
 *     dvar_tf_writer_end(w);
 *     ...
 *     dvar_tf_writer_commit(w);
 *     dvar_tf_writer_free(w);
 *
 * A tensor is streamed: the writer holds one 1 MiB write buffer and the
 * entries (a few dozen bytes per key and per slice), whatever the tensors'
 * sizes, and checksums the bytes as they come. Nothing appears at PREFIX
 * before dvar_tf_writer_commit: the files are written under temporary
 * names (docs/FORMAT.md, "Temporary names") and renamed into place, the
 * index last, as TensorFlow does; opening a writer removes the leftovers
 * of dead writers in the bundle's directory.
 *
 * Keys are TensorFlow's checkpoint keys ("dense/kernel/.ATTRIBUTES/
 * VARIABLE_VALUE", "global_step"): any non-empty NUL-free string (the
 * empty key is the header's). Dtypes are the dvar_dtypes (numeric and
 * DVAR_BOOL), plus string tensors (DVAR_DTYPE_STRING, the object graph of a
 * TF2 checkpoint, vocabularies) written whole by dvar_tf_writer_add_strings.
 * Calls on one writer come from one thread at a time.
 */
typedef struct dvar_tf_writer dvar_tf_writer;

/**
 * Start writing a TensorBundle that will appear at prefix when committed.
 * The directory holding it (dirname(prefix)) is created when missing, and
 * removed again by dvar_tf_writer_free when nothing was committed.
 * @param out     the writer; the caller frees it with dvar_tf_writer_free
 * @param prefix  the bundle's prefix ("dir/model.ckpt-100"): not empty, not
 *                ending in '/'
 * @param opts    NULL for defaults; dvar_writer_open's options, of which a
 *                bundle (one stream, no chunks) uses flags'
 *                DVAR_WRITE_NO_FSYNC (the data file and the directory are
 *                not fsynced) and progress (the bytes of the data file so
 *                far, total 0, from the calling thread); chunk_size,
 *                compress, threads, keep_last and DVAR_WRITE_NO_DIRECT_IO
 *                are ignored.
 * @return DVAR_EEXISTS when PREFIX.index or PREFIX.data-00000-of-00001
 *         exists already (a bundle is never replaced); DVAR_EINVAL for a bad
 *         prefix or options version; DVAR_EIO when a file or directory
 *         cannot be created.
 */
DVAR_EXTERN(int) dvar_tf_writer_open(dvar_tf_writer **out, const char *prefix,
                                     const dvar_write_options *opts);

/**
 * Open a tensor, or one slice of a partitioned tensor, whose bytes will
 * come through dvar_tf_writer_write; TensorFlow's BundleWriter::AddSlice
 * (Add when slice is NULL).
 *
 * A slice that covers the whole shape, or NULL, is a plain entry under key.
 * Any other slice makes key a partitioned tensor: its entry holds dtype,
 * full shape and the list of its slices, and each slice's bytes are an
 * entry of their own under the slice's key (EncodeTensorNameSlice), shaped
 * as the slice, the way TensorFlow saves a ShardedVariable or a
 * PartitionedVariable. Every extent is recorded as start and length, as
 * TensorFlow's Python writes them, except for dimensions of size 0, which
 * are recorded as whole ("-"): TensorFlow's extents have positive lengths.
 *
 * @param key    1 or more bytes, NUL-terminated, borrowed for the call
 * @param dtype  a dvar_dtype
 * @param full   the tensor's full shape
 * @param slice  the part whose bytes follow, inside full; NULL for all of it
 * @return DVAR_EINVAL, naming the key and nothing written, for: an empty
 *         key; an unknown dtype; a bad shape or a slice outside it; a slice
 *         of length 0 in a dimension that is not (TensorFlow cannot record
 *         it); a key added before ("Adding duplicate key: KEY", as
 *         TensorFlow says), as a plain entry or, for a plain entry, as a
 *         partitioned one; a slice whose dtype or full shape differs from
 *         the key's earlier slices; a slice that overlaps an earlier slice
 *         of the key; a tensor already open. The writer stays usable.
 */
DVAR_EXTERN(int) dvar_tf_writer_begin(dvar_tf_writer *w, const char *key, int dtype,
                                      const dvar_shape *full, const dvar_slice *slice);

/**
 * The next len bytes of the open tensor (its elements row-major,
 * little-endian, bool as one byte 0 or 1), in any piece sizes. data is
 * borrowed for the call.
 * @return DVAR_EINVAL when no tensor is open, or when the pieces add up to
 *         more bytes than the tensor holds; DVAR_EIO when the data file
 *         cannot be written. After either failure the writer is unusable:
 *         nothing can be committed any more, free it.
 */
DVAR_EXTERN(int) dvar_tf_writer_write(dvar_tf_writer *w, const void *data, size_t len);

/**
 * Close the open tensor: its entry is recorded (offset, size and the masked
 * CRC-32C of its bytes).
 * @return DVAR_EINVAL when no tensor is open, or when fewer bytes than it
 *         holds were written (naming both counts; the writer is then
 *         unusable).
 */
DVAR_EXTERN(int) dvar_tf_writer_end(dvar_tf_writer *w);

/** dvar_tf_writer_begin, _write of the tensor's bytes at data (borrowed), _end. */
DVAR_EXTERN(int) dvar_tf_writer_add(dvar_tf_writer *w, const char *key, int dtype,
                                    const dvar_shape *full, const dvar_slice *slice,
                                    const void *data);

/**
 * Add a string tensor (TensorFlow's DT_STRING, dvar_var_info.dtype
 * DVAR_DTYPE_STRING) whole, as TensorFlow writes one: the lengths as
 * varints, their masked CRC-32C, then the bytes. The tensor is encoded in
 * memory (about the size of its bytes) before it is written.
 * @param shape  its shape; n = its element count strings
 * @param lens   the n byte lengths (NULL when n is 0), borrowed for the call
 * @param bytes  the n strings back to back, sum(lens) bytes (any bytes, NULs
 *               included), borrowed for the call
 * @return DVAR_EINVAL for an empty or duplicate key ("Adding duplicate key:
 *         KEY"), a bad shape, NULL lens or bytes where there are some, a
 *         tensor open (the writer stays usable); DVAR_EIO when the data file
 *         cannot be written (the writer is then unusable).
 */
DVAR_EXTERN(int) dvar_tf_writer_add_strings(dvar_tf_writer *w, const char *key,
                                            const dvar_shape *shape, const uint64_t *lens,
                                            const void *bytes);

/**
 * Finish: write the index (its keys in bytewise order, the header first),
 * fsync both files, rename the data file and then the index into place
 * (never replacing a file; the index appears last) and fsync the
 * directory. A bundle with no tensors is valid (the header alone).
 * @return DVAR_EINVAL when a tensor is still open, or when the writer was
 *         committed before or is unusable after a failed write;
 *         DVAR_EEXISTS when a file of the bundle appeared meanwhile;
 *         DVAR_EIO. After a failure nothing is at prefix.
 */
DVAR_EXTERN(int) dvar_tf_writer_commit(dvar_tf_writer *w);

/**
 * Free the writer. NULL is a no-op. An uncommitted writer removes every file
 * it wrote and the directories it created.
 */
DVAR_EXTERN(void) dvar_tf_writer_free(dvar_tf_writer *w);

DVAR_END_DECL

#endif
