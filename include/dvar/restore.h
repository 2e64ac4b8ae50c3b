/*
 * dvar/restore.h - reading checkpoints back: restoring one into variables of
 * any topology, and the offline operations as library calls: reshard,
 * export (dvar, safetensors, TensorFlow, npy), import (npy, npz,
 * safetensors), comparing two checkpoints (diff) and logical digests.
 *
 * The offline calls read with the one read primitive (dvar_reader_read of
 * any hyperrectangle), stream every variable in bounded pieces (memory stays
 * at a few chunks whatever the sizes) and write through a writer that
 * commits atomically: a failed or cancelled call leaves nothing at its
 * output, and its temporary files are removed. Every argument is borrowed
 * for the call; nothing here keeps a pointer after it returns.
 */
#ifndef DVAR_RESTORE_H
#define DVAR_RESTORE_H

#include <signal.h>

#include "common.h"
#include "core.h"
#include "format.h"
#include "input.h"
#include "runtime.h"
#include "sharding.h"

DVAR_BEGIN_DECL

/* ------------------------------------------------------------ restore */

/* A plain named tensor (dvar/store.h, which includes this header). */
struct dvar_store_tensor;

typedef struct {
	unsigned int version;            /**< DVAR_RESTORE_OPTIONS_VERSION */
	const dvar_read_options *read;   /**< NULL for the defaults */
	const struct dvar_store_tensor *tensors; /**< plain tensors to fill; may be NULL */
	size_t num_tensors;
	/** Sharded variables to fill: each worker reads only the rows of its own
	 *  shards, from whatever slices were saved (any shard count, or a plain
	 *  entry). May be NULL. */
	dvar_sharded_variable *const *sharded;
	size_t num_sharded;
	/** Input iterators to put back where the checkpoint's were, by name:
	 *  exactly on the same topology, at the same number of global-batch
	 *  steps on another one (docs/INPUT.md); checked with everything else
	 *  before anything changes. May be NULL. */
	dvar_input_iterator *const *iterators;
	size_t num_iterators;
} dvar_restore_options;

#define DVAR_RESTORE_OPTIONS_VERSION 1
#define DVAR_RESTORE_OPTIONS_INIT { DVAR_RESTORE_OPTIONS_VERSION }

/**
 * Set *opts to DVAR_RESTORE_OPTIONS_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_restore_options_init(dvar_restore_options *opts, unsigned int version);

/**
 * Collective: restore vars[0..n) (and opts->tensors) from a checkpoint, by
 * name. path is a checkpoint directory, or a root (its latest checkpoint, as
 * the chief resolves it, so every worker reads the same one).
 *
 * What each variable receives depends on its own kind, not on what was
 * saved: ON_WRITE: the value on every replica; ON_READ SUM: the value split
 * over the N replicas so that the cross-replica read gives it back (floats:
 * value / N as TensorFlow; integers: exactly, where TensorFlow truncates);
 * ON_READ MEAN, ONLY_FIRST_REPLICA and NONE: the value on every replica.
 *
 * Before any variable changes, every worker checks that the checkpoint holds
 * every name (DVAR_ENOTFOUND) with the variable's dtype and shape
 * (DVAR_ESHAPE); a failure on any worker fails the call on all of them with
 * nothing changed. A read failure after that (a corrupt chunk) leaves the
 * variables restored before it changed.
 *
 * Restoring marks nothing: an open function scope stays saveable (TF's
 * restore ops assign the components directly).
 * @param opts NULL for defaults
 */
DVAR_EXTERN(int) dvar_restore(dvar_strategy *s, const char *path, dvar_variable *const *vars,
                              size_t n, const dvar_restore_options *opts);

/* ------------------------------------------------- offline operations */

/**
 * A note on what an operation leaves out or changes, for people ("string
 * tensor 'x' skipped: safetensors has no strings"). message is borrowed for
 * the call. Called from the thread that started the operation.
 */
typedef void (*dvar_note_fn)(void *userdata, const char *message);

/**
 * One variable written, under the name it has in the output, with the raw
 * bytes of its value. Called from the thread that started the operation,
 * after the variable is complete (the output itself appears only at the end).
 */
typedef void (*dvar_written_fn)(void *userdata, const char *name, uint64_t bytes);

/**
 * What every offline operation reports to, and is stopped by. A zeroed
 * struct reports nothing and is never cancelled.
 */
typedef struct {
	/** Bytes copied so far of the total the operation will copy, after
	 *  every piece (at most 8 MiB): a display throttles it itself. */
	dvar_progress_fn progress;
	void *progress_userdata;
	/** Notes (NULL: none are reported). */
	dvar_note_fn note;
	void *note_userdata;
	/** Each variable written (NULL: not reported). */
	dvar_written_fn written;
	void *written_userdata;
	/** When set and *cancel becomes non-zero (a signal handler may set it),
	 *  the operation stops at its next piece, removes what it wrote and
	 *  returns DVAR_ECANCELED. */
	const volatile sig_atomic_t *cancel;
} dvar_callbacks;

/** A variable and the shard count it is to be written with. */
typedef struct {
	const char *name;
	int64_t shards; /**< >= 1; 1 is one plain entry */
} dvar_shard_count;

/** The most shards dvar_reshard and dvar_import write of one variable. */
#define DVAR_MAX_SHARDS 65536

typedef struct {
	unsigned int version; /**< DVAR_RESHARD_OPTIONS_VERSION */
	/** Every sharded variable (saved as several slices, or with kind
	 *  sharded) as this many shards; 0: not given. */
	int64_t shards;
	/** Or as TensorFlow's partitioner would shard it: "fixed:M",
	 *  "min-size:BYTES[:MAX_SHARDS]", "max-size:BYTES[:MAX_SHARDS]"
	 *  (dvar_partitioner_parse); NULL: not given. Not with shards. */
	const char *partitioner;
	/** Any variable by name (sharded or not), overriding the two above.
	 *  A name the checkpoint lacks is DVAR_ENOTFOUND. */
	const dvar_shard_count *vars;
	size_t num_vars;
	uint64_t chunk_size;   /**< raw bytes per chunk of the output; 0: 4 MiB */
	dvar_compress compress; /**< chunks of the output */
	int threads;           /**< reader and writer threads; 0: min(CPUs, 4) */
	dvar_callbacks cb;
} dvar_reshard_options;

#define DVAR_RESHARD_OPTIONS_VERSION 1
#define DVAR_RESHARD_OPTIONS_INIT { DVAR_RESHARD_OPTIONS_VERSION }

/**
 * Set *opts to DVAR_RESHARD_OPTIONS_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_reshard_options_init(dvar_reshard_options *opts, unsigned int version);

/**
 * A new checkpoint at out in which the chosen variables are written as M
 * shards in the div layout along the first axis (one slice per shard;
 * attributes kind=sharded, shards=M, layout=div; M = 1 is one plain entry,
 * kind=plain where it was kind=sharded) and every other variable is copied
 * as it was saved, slices and attributes alike. M is capped by the rows (a
 * note says so; a scalar is one shard); more than DVAR_MAX_SHARDS shards is
 * DVAR_EINVAL. Each target shard is read from whatever slices were saved.
 * From a TensorFlow checkpoint a partitioned tensor counts as sharded and
 * string tensors are left out with a note.
 * @param in   a checkpoint, a root (its latest), or a TensorFlow checkpoint
 * @param out  the checkpoint directory to create (DVAR_EEXISTS if it exists)
 * @param opts at least one of shards, partitioner or vars
 */
DVAR_EXTERN(int) dvar_reshard(const char *in, const char *out, const dvar_reshard_options *opts);

typedef enum {
	/** By out's name: ".safetensors" is SAFETENSORS, anything else DVAR. */
	DVAR_EXPORT_AUTO = 0,
	/** A dvar checkpoint, every chunk raw: each variable mappable in place
	 *  (dvar_reader_map). */
	DVAR_EXPORT_DVAR = 1,
	/** One safetensors file. */
	DVAR_EXPORT_SAFETENSORS = 2,
	/** A TensorFlow checkpoint (TensorBundle) at the prefix out. */
	DVAR_EXPORT_TF = 3,
	/** A directory of one .npy file per variable, with manifest.json
	 *  mapping the variables' names to their files. */
	DVAR_EXPORT_NPY = 4
} dvar_export_format;

/** DVAR_EXPORT_TF: a variable saved as several slices becomes a TensorFlow
 *  partitioned tensor, one slice per saved slice (as TensorFlow saves a
 *  ShardedVariable). Without it every variable is one full tensor. */
#define DVAR_EXPORT_KEEP_SHARDS (1u << 0)
/** Leave out optimizer slots: TF1's ".../Adam", ".../Adam_1" (any name whose
 *  last component is an optimizer's slot suffix) and TF2's keys holding
 *  "/.OPTIMIZER_SLOT/". */
#define DVAR_EXPORT_DROP_OPTIMIZER (1u << 1)
/** Export TF2's object keys under their short names:
 *  "x/.ATTRIBUTES/VARIABLE_VALUE" -> "x" (dvar_short_name). */
#define DVAR_EXPORT_SHORT_NAMES (1u << 2)

typedef struct {
	unsigned int version;      /**< DVAR_EXPORT_OPTIONS_VERSION */
	dvar_export_format format; /**< default DVAR_EXPORT_AUTO */
	uint32_t flags;            /**< DVAR_EXPORT_* */
	/** Leave out the variables whose name starts with one of these; a
	 *  prefix no variable has is DVAR_ENOTFOUND. */
	const char *const *drop_prefixes;
	size_t num_drop_prefixes;
	uint64_t chunk_size;       /**< DVAR_EXPORT_DVAR: raw bytes per chunk; 0: 4 MiB */
	int threads;               /**< reader and writer threads; 0: min(CPUs, 4) */
	dvar_callbacks cb;
} dvar_export_options;

#define DVAR_EXPORT_OPTIONS_VERSION 1
#define DVAR_EXPORT_OPTIONS_INIT { DVAR_EXPORT_OPTIONS_VERSION }

/**
 * Set *opts to DVAR_EXPORT_OPTIONS_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_export_options_init(dvar_export_options *opts, unsigned int version);

/**
 * Write every variable of in (less the ones dropped) as one full tensor in
 * another format, for serving or for another tool. A sharded variable loses
 * its layout attributes in a dvar export (kind=sharded becomes kind=plain);
 * the other formats have no attributes. String tensors of a TensorFlow
 * checkpoint go into a TF export as they are and are left out of the
 * others with a note.
 * @return DVAR_EEXISTS when out (or, for TF, one of its files) exists;
 *         DVAR_EINVAL for an out name that contradicts the format (a name
 *         ending in ".safetensors" for DVAR or NPY), a name a safetensors
 *         file cannot hold, or two variables that get the same exported name.
 */
DVAR_EXTERN(int) dvar_export(const char *in, const char *out, const dvar_export_options *opts);

/** One input of dvar_import. */
typedef struct {
	/** A .npy file, an .npz archive (stored or deflated members, as
	 *  np.savez and np.savez_compressed write them; ZIP64 too) or a
	 *  .safetensors file, told apart by their first bytes. */
	const char *path;
	/** .npy: the variable's name (NULL: the file name less its directory
	 *  and ".npy"). .npz and .safetensors: NULL imports every array under
	 *  its own name (an npz member's name less ".npy"; members not named
	 *  "*.npy" are left out with a note); a name imports every array as
	 *  "name/array". */
	const char *name;
} dvar_import_source;

typedef struct {
	unsigned int version;    /**< DVAR_IMPORT_OPTIONS_VERSION */
	/** >= 0: write out/ckpt-<step> under the root out and make it the
	 *  latest; -1 (the default of DVAR_IMPORT_OPTIONS_INIT and
	 *  dvar_import_options_init; a zeroed struct has 0): out is the checkpoint. */
	int64_t step;
	int keep_last;           /**< with step >= 0: keep this many; 0 = all */
	/** Arrays to write as this many div shards (by their variable name). */
	const dvar_shard_count *shards;
	size_t num_shards;
	uint64_t chunk_size;     /**< 0: 4 MiB */
	dvar_compress compress;
	int threads;             /**< writer threads; 0: min(CPUs, 4) */
	dvar_callbacks cb;
} dvar_import_options;

#define DVAR_IMPORT_OPTIONS_VERSION 1
#define DVAR_IMPORT_OPTIONS_INIT { DVAR_IMPORT_OPTIONS_VERSION, -1 }

/**
 * Set *opts to DVAR_IMPORT_OPTIONS_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_import_options_init(dvar_import_options *opts, unsigned int version);

/**
 * A new checkpoint at out from n array files. Every file is opened and its
 * header checked (safetensors: offsets inside the data, sizes that match
 * the shapes, no overlaps), and every name and shard count resolved, before
 * anything is written; the data is then streamed (read in pieces, never
 * mapped or loaded whole), so memory stays at a few chunks whatever the
 * inputs' sizes. Each npz member's CRC-32 is checked as it streams. A file
 * that changed between the check and the copy fails the call. Bytes after
 * an array's data in a .npy file (or member) are ignored, with a note.
 * Arrays named in opts->shards are written as that many div shards along
 * their first axis (dvar_reshard's layout and attributes; a note when the
 * rows cap the count).
 * dtypes: bool, int8-64, uint8-64, float16, bfloat16 (safetensors' BF16),
 * float32, float64; little-endian, C order. Others are DVAR_ENOTSUPP naming
 * the file, the array and its type.
 * A failed or cancelled import leaves nothing at out (a root the call
 * created for opts->step is removed again).
 * @return DVAR_EEXISTS when out exists (without step), DVAR_EINVAL for two
 *         arrays of one name, a name a variable cannot have, or a shard
 *         count naming no array (or one twice), DVAR_ECORRUPT for a damaged
 *         or truncated file (naming it, and the member or tensor),
 *         DVAR_ENOTSUPP for what dvar cannot hold or read (a dtype,
 *         Fortran order, big-endian data, an encrypted member or another
 *         zip compression method), DVAR_ECANCELED when cancelled.
 */
DVAR_EXTERN(int) dvar_import(const char *out, const dvar_import_source *srcs, size_t n,
                             const dvar_import_options *opts);

/* ---------------------------------------------------------------- diff */

/** Elements equal only when their bytes are: -0.0 differs from 0.0, and a
 *  NaN from a NaN with other bits. Not with atol or rtol. */
#define DVAR_DIFF_BITWISE (1u << 0)
/** Leave out what TensorFlow keeps beside the variables, on both sides:
 *  "_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter" and "save_counter/...",
 *  and every string tensor (to check a TF checkpoint against its conversion). */
#define DVAR_DIFF_SKIP_TF_BOOKKEEPING (1u << 1)
/** Compare dtypes, shapes and values only, not attributes. */
#define DVAR_DIFF_NO_ATTRS (1u << 2)
/** Match variables by their TF2 short names (dvar_short_name), and name
 *  them so: a TensorFlow checkpoint's "x/.ATTRIBUTES/VARIABLE_VALUE" then
 *  compares with a dvar checkpoint's "x". */
#define DVAR_DIFF_SHORT_NAMES (1u << 3)

typedef struct {
	unsigned int version; /**< DVAR_DIFF_OPTIONS_VERSION */
	/** Elements equal when |a - b| <= atol + rtol * |b| (as doubles, B the
	 *  reference, as numpy.isclose; a NaN still equals a NaN); the one not
	 *  given counts as 0. Below 0: not given (-1 in DVAR_DIFF_OPTIONS_INIT
	 *  and dvar_diff_options_init; a zeroed struct has 0, given). Neither
	 *  given: equal as numpy.array_equal(a, b, equal_nan=True), integers
	 *  exactly. Not infinite nor NaN. */
	double atol;
	double rtol;
	uint32_t flags; /**< DVAR_DIFF_* */
	/** Leave out the variables whose name (or short name) starts with one
	 *  of these, on both sides; they count as excluded. */
	const char *const *exclude_prefixes;
	size_t num_exclude_prefixes;
	/** Bytes one piece of a variable may take: both sides' elements and
	 *  their values as doubles; 0: 16 MiB. */
	uint64_t piece_bytes;
	int threads;     /**< read threads of each side; 0: dvar_read_options' default */
	dvar_callbacks cb; /**< progress (bytes read of both sides) and cancel; no notes */
} dvar_diff_options;

#define DVAR_DIFF_OPTIONS_VERSION 1
#define DVAR_DIFF_OPTIONS_INIT { DVAR_DIFF_OPTIONS_VERSION, -1, -1 }

/**
 * Set *opts to DVAR_DIFF_OPTIONS_INIT: zeroed, with version and the defaults.
 * @return DVAR_EINVAL for a version this library does not know
 */
DVAR_EXTERN(int) dvar_diff_options_init(dvar_diff_options *opts, unsigned int version);

/** What dvar_diff found; read with the dvar_diff_report_* calls. */
typedef struct dvar_diff_report dvar_diff_report;

/** The two sides of a comparison. */
typedef enum {
	DVAR_DIFF_A = 0,
	DVAR_DIFF_B = 1
} dvar_diff_side;

/** How a variable both sides hold compares. */
typedef enum {
	DVAR_DIFF_EQUAL = 0,         /**< dtype, shape and values (attributes aside) */
	DVAR_DIFF_VALUES_DIFFER = 1,
	DVAR_DIFF_DTYPE_DIFFERS = 2, /**< values not compared */
	DVAR_DIFF_SHAPE_DIFFERS = 3  /**< same dtype; values not compared */
} dvar_diff_status;

/** One variable both sides hold. Pointers are borrowed from the report. */
typedef struct {
	const char *name;        /**< as matched: its name, or short name */
	dvar_diff_status status;
	int dtype_a, dtype_b;    /**< dvar_var_info.dtype of each side */
	dvar_shape shape_a, shape_b;
	uint64_t num_elements;   /**< compared: 0 unless dtypes and shapes agree */
	uint64_t num_different;
	/** The largest |a - b| among elements whose bytes differ, as doubles
	 *  (NaNs left out; may be infinite); 0 for string tensors. */
	double max_abs_diff;
	/** Set when values differ: the first differing element in row-major
	 *  order, its flat index and each side's bytes (dtype size bytes, or a
	 *  string element's bytes). */
	int has_first;
	uint64_t first_index;
	const void *first_a;
	size_t first_a_len;
	const void *first_b;
	size_t first_b_len;
	/** Attribute keys whose values differ (dvar_diff_report_attr_at). */
	size_t num_attrs;
} dvar_var_diff;

/**
 * Compare checkpoint a with b variable by variable. Variables are matched
 * by name (by short name with DVAR_DIFF_SHORT_NAMES: two variables of one
 * side with the same short name are DVAR_EINVAL). Of each variable both
 * hold, the dtypes are compared, then the shapes, then the values, read in
 * pieces from both sides at once (memory stays at opts->piece_bytes; a
 * string tensor is read whole and compared element by element, byte for
 * byte, whatever the tolerances), then the attributes. Attributes that
 * only say how the rows are stored, which reshard and export change
 * (shards, layout, kind plain vs sharded), are left out, and so is a
 * variable one side has none for (a TensorFlow checkpoint's, a plain
 * import's).
 * @param out  receives the report (free it with dvar_diff_report_free). After
 *             a failure once the comparison began (a read error, a dtype dvar
 *             cannot read, cancellation: DVAR_ECANCELED) it still receives
 *             what was found until then: both lists of variables only one
 *             side holds, and the variables compared before the failure.
 *             After an earlier failure it is NULL.
 * @param a, b checkpoints, roots (their latest) or TensorFlow checkpoints
 * @param opts NULL for the defaults
 * @return DVAR_EINVAL for DVAR_DIFF_BITWISE with atol or rtol, or a
 *         tolerance that is infinite or NaN; DVAR_ENOTSUPP for values of a
 *         TensorFlow dtype dvar has no type for
 */
DVAR_EXTERN(int) dvar_diff(dvar_diff_report **out, const char *a, const char *b,
                           const dvar_diff_options *opts);

/** Free the report. NULL is a no-op. */
DVAR_EXTERN(void) dvar_diff_report_free(dvar_diff_report *rep);

/** The checkpoint side compared, as dvar_reader_path gives it (borrowed). */
DVAR_EXTERN(const char *) dvar_diff_report_path(const dvar_diff_report *rep,
                                                dvar_diff_side side);

/** Variables left out, of both sides (exclude_prefixes, DVAR_DIFF_SKIP_TF_BOOKKEEPING). */
DVAR_EXTERN(size_t) dvar_diff_report_num_excluded(const dvar_diff_report *rep);

/** Number of the variables only side holds. */
DVAR_EXTERN(size_t) dvar_diff_report_num_only_in(const dvar_diff_report *rep,
                                                 dvar_diff_side side);

/** The k-th of them, in that side's order (borrowed); NULL when k is out of range. */
DVAR_EXTERN(const char *) dvar_diff_report_only_in(const dvar_diff_report *rep,
                                                   dvar_diff_side side, size_t k);

/** Number of variables both sides hold (and were compared). */
DVAR_EXTERN(size_t) dvar_diff_report_num_vars(const dvar_diff_report *rep);

/** Variable i of those, in A's order (its variables' name order). */
DVAR_EXTERN(int) dvar_diff_report_var(const dvar_diff_report *rep, size_t i, dvar_var_diff *out);

/**
 * Attribute k (in key order) that differs on variable i: its key and each
 * side's value, NULL for a side without it (borrowed from the report).
 */
DVAR_EXTERN(int) dvar_diff_report_attr_at(const dvar_diff_report *rep, size_t i, size_t k,
                                          const char **key, const char **a, const char **b);

/** 1 when nothing differs: no variable only in one side, every one equal
 *  with no attribute that differs; else 0. (A report handed back with a
 *  failure covers only what was compared before it.) */
DVAR_EXTERN(int) dvar_diff_report_identical(const dvar_diff_report *rep);

/**
 * The CRC-32C of variable i's logical value: its elements row-major,
 * little-endian, as one tensor, whatever its slices, chunks and
 * compression. Where the saved slices tile the logical order (one slice, or
 * axis-0 slices back to back) it is combined from the chunk checksums and
 * reads no data; otherwise, and for TensorFlow checkpoints, it reads the
 * value. Equal digests prove that a reshard, export or conversion put every
 * byte in its place. A string tensor is DVAR_ENOTSUPP.
 */
DVAR_EXTERN(int) dvar_reader_digest(dvar_reader *r, size_t i, uint32_t *crc);

/**
 * TensorFlow 2's object-based checkpoint key shortened (release it with
 * dvar_free; NULL when
 * out of memory): a trailing "/.ATTRIBUTES/VARIABLE_VALUE" goes,
 * "/.OPTIMIZER_SLOT/" becomes '@' and any other "/.ATTRIBUTES/" ':'.
 * "x/.ATTRIBUTES/VARIABLE_VALUE" -> "x";
 * "dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE" ->
 * "dense/kernel@optimizer/m". Other names come back as they are.
 */
DVAR_EXTERN(char *) dvar_short_name(const char *name);

/** Room for any header dvar_npy_header writes. */
#define DVAR_NPY_HEADER_MAX 256

/**
 * The .npy header (format 1.0, as numpy writes it: magic, version, the dict
 * padded with spaces and a newline to a multiple of 64 bytes) of a C-order
 * array of dtype and shape, into buf (cap >= DVAR_NPY_HEADER_MAX always
 * holds it); *len receives its length. The array's bytes follow it.
 * @return DVAR_ENOTSUPP for bfloat16 (numpy has no such type), DVAR_EINVAL
 *         for a dtype that is not a dvar_dtype or a cap too small.
 */
DVAR_EXTERN(int) dvar_npy_header(void *buf, size_t cap, size_t *len, int dtype,
                                 const dvar_shape *shape);

DVAR_END_DECL

#endif
