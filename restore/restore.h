/*
 * restore/restore.h - private to libdvar: what the files of restore/ share.
 * An operation's callbacks (progress, notes, cancel: op.c), streaming a
 * region of a variable from a reader in bounded pieces (copy.c), the div
 * layout attributes a rewritten variable gets (copy.c), and the file
 * formats export writes and import reads: safetensors (safetensors.c), .npy
 * (npy.c), the zip archives of .npz (npz.c). Not installed; dvar/restore.h
 * is the public API.
 *
 * Ownership: a dvar_op and a dvar_copier belong to the operation that
 * initialises them on its stack; dvar_copier_free releases the buffer.
 */
#ifndef DVAR_RESTORE_PRIVATE_H
#define DVAR_RESTORE_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "dvar/dvar.h"

DVAR_BEGIN_DECL

/* Threads of the readers and writers of the offline operations by default:
 * each holds a chunk buffer or two, so this bounds their memory. */
#define DVAR_OP_THREADS 4

/* Bytes of one piece a copy reads at a time. */
#define DVAR_PIECE_BYTES (8u << 20)

/* ---------------------------------------------------------------- op.c */

/* One running operation: its callbacks and how far it got. */
typedef struct {
	dvar_callbacks cb; /* copied; zeroed when the options gave none */
	uint64_t done;     /* bytes so far */
	uint64_t total;    /* bytes in all, for progress */
} dvar_op;

void dvar_op_init(dvar_op *op, const dvar_callbacks *cb, uint64_t total);

/* DVAR_ECANCELED (with a message naming what) once *cb.cancel is set; else DVAR_OK. */
int dvar_op_check(const dvar_op *op, const char *what);

/* bytes more are done: report progress (after every piece). */
void dvar_op_advance(dvar_op *op, uint64_t bytes);

/* Variable name (as written) is complete with bytes of value: tell the caller. */
void dvar_op_written(const dvar_op *op, const char *name, uint64_t bytes);

/* A note for the caller's note callback (printf-formatted); nothing without one. */
void dvar_op_note(const dvar_op *op, const char *fmt, ...) DVAR_PRINTF(2, 3);

/* threads as the options give them: <= 0 is min(online CPUs, DVAR_OP_THREADS). */
int dvar_op_threads(int threads);

/* ---------------------------------------------------------------- copy.c */

/* A sink for pieces of a region, in row-major order; returns a dvar status. */
typedef int (*dvar_piece_fn)(void *ctx, const void *data, uint64_t bytes);

/* Reads regions of variables in bounded pieces into one reused buffer. */
typedef struct {
	void *buf;
	uint64_t cap;
	dvar_op *op; /* advanced by every piece; checked for cancellation */
} dvar_copier;

void dvar_copier_init(dvar_copier *c, dvar_op *op);
void dvar_copier_free(dvar_copier *c);

/* Read region of variable i (of dtype) in row-major pieces of at most
 * DVAR_PIECE_BYTES, handing each to fn. */
int dvar_copy_pieces(dvar_copier *c, dvar_reader *r, size_t i, int dtype,
                     const dvar_slice *region, dvar_piece_fn fn, void *ctx);

/* Write region of variable i (described by v) as one streamed slice named
 * name (v->name when NULL) in w. */
int dvar_copy_region(dvar_copier *c, dvar_reader *r, size_t i, const dvar_var_info *v,
                     const char *name, dvar_writer *w, const dvar_slice *region);

/* DVAR_ENOTSUPP: variable name has a TensorFlow dtype dvar has no type for. */
int dvar_error_tf_dtype(const char *name, int dtype);

/* 1 when variable i is sharded: saved as more than one slice, or kind=sharded. */
int dvar_var_is_sharded(const dvar_reader *r, size_t i);

/*
 * The div layout of want shards over shape's rows (capped by the rows; a
 * scalar gets one shard): *offsets (malloc'ed, *n + 1 entries) and *n.
 * want above DVAR_MAX_SHARDS is DVAR_EINVAL naming the variable.
 */
int dvar_shard_layout(const char *name, const dvar_shape *shape, int64_t want,
                      int64_t **offsets, int64_t *n);

/* Shard k of a layout: rows [offsets[k], offsets[k+1]) of shape, every column. */
void dvar_shard_slice(const dvar_shape *shape, const int64_t *offsets, int64_t k,
                      dvar_slice *out);

/* A note when a layout got fewer shards than asked for (rows, or a scalar). */
void dvar_shard_note(const dvar_op *op, const char *name, const dvar_shape *shape,
                     int64_t want, int64_t n);

/* kind=sharded, shards=n, layout=div on name when n > 1; nothing for n <= 1. */
int dvar_set_shard_attrs(dvar_writer *w, const char *name, int64_t n);

/* 1 when variable i is a mirrored or sync-on-read variable (kind attribute). */
int dvar_var_is_replicated(const dvar_reader *r, size_t i);

/*
 * Copy variable i's attributes from r to name in w. n = 0 keeps them all as
 * they are; n >= 1 (the variable is rewritten as n div shards) drops the old
 * layout's and sets n's (for n = 1 a kind=sharded becomes kind=plain, as
 * dvar_save writes a one-shard variable; for n > 1 a mirrored or
 * sync-on-read variable becomes kind=sharded without its synchronization,
 * aggregation and replica check, as dvar_save writes a sharded variable).
 */
int dvar_copy_attrs(const dvar_reader *r, size_t i, dvar_writer *w, const char *name, int64_t n);

/* ---------------------------------------------------------------- names.c */

/* 1 when name is an optimizer's slot: TF2's ".../.OPTIMIZER_SLOT/...", or
 * TF1's "<var>/Adam", "<var>/Adam_1", "<var>/Momentum", ... */
int dvar_is_optimizer_slot(const char *name);

/* ---------------------------------------------------------------- safetensors.c */

/* "F32", "BF16", ...: the safetensors name of a dvar_dtype; NULL when none. */
const char *dvar_st_dtype_name(int dtype);

/* One tensor of a safetensors file. */
typedef struct {
	char *name;      /* UTF-8, NUL-free (malloc'ed) */
	int dtype;
	dvar_shape shape;
	uint64_t offset; /* of its data in the file */
	uint64_t bytes;
} dvar_st_tensor;

/*
 * Read and check the header of the safetensors file open at fd (path in
 * messages, size bytes): its tensors in *out (malloc'ed, *n of them, in the
 * order of their data). DVAR_ECORRUPT for a damaged or truncated file or
 * one that breaks the format's rules (offsets outside the data, a size that
 * is not the shape's, overlaps), DVAR_ENOTSUPP for a dtype dvar lacks.
 */
int dvar_st_read_header(int fd, const char *path, uint64_t size, dvar_st_tensor **out,
                        size_t *n);
void dvar_st_tensors_free(dvar_st_tensor *t, size_t n);

/* ---------------------------------------------------------------- npz.c */

/* One member of a zip archive, as its central directory entry describes it. */
typedef struct {
	char *name;      /* malloc'ed, NUL-free */
	uint64_t header; /* offset of its local header */
	uint64_t csize;  /* bytes in the archive */
	uint64_t usize;  /* bytes once inflated */
	uint32_t crc;    /* CRC-32 of those */
	uint16_t method;
	uint16_t flags;
} dvar_zip_member;

/*
 * The members of the zip archive open at fd (path in messages, size bytes),
 * from its central directory (ZIP64 included): *out (malloc'ed, *n of them).
 * DVAR_ECORRUPT for a damaged or truncated archive.
 */
int dvar_zip_list(int fd, const char *path, uint64_t size, dvar_zip_member **out, size_t *n);
void dvar_zip_members_free(dvar_zip_member *m, size_t n);

/* One member's bytes, read front to back (m is borrowed while it is open). */
typedef struct dvar_zip_stream dvar_zip_stream;

/* DVAR_ENOTSUPP for an encrypted member or a method other than stored and
 * deflated; DVAR_ECORRUPT when its local header or data are not in the file. */
int dvar_zip_open(dvar_zip_stream **out, int fd, const char *path, uint64_t size,
                  const dvar_zip_member *m);

/* The next len bytes of the member (no more than are left), inflated where
 * deflated. Reading its last byte checks its CRC-32: DVAR_ECORRUPT when it
 * differs, or when the deflate data are damaged. */
int dvar_zip_read(dvar_zip_stream *s, void *buf, size_t len);
void dvar_zip_close(dvar_zip_stream *s); /* NULL is a no-op */

/* ---------------------------------------------------------------- npy.c */

/* "<f4", "|b1", ...: the .npy descr numpy writes for dtype; NULL for bfloat16. */
const char *dvar_npy_descr(int dtype);

/* Bytes of a .npy file's start that import reads for its header: numpy
 * itself refuses headers over 10,000 bytes by default. */
#define DVAR_NPY_READ_MAX (64u << 10)

/* What a .npy header says. */
typedef struct {
	int dtype;
	dvar_shape shape;
	uint64_t offset;   /* where the data starts: the header's length */
	uint64_t bytes;    /* the data's */
	uint64_t trailing; /* bytes after the data (ignored) */
} dvar_npy_info;

/*
 * Parse the .npy header at buf: the first len bytes (min(size,
 * DVAR_NPY_READ_MAX)) of a file or zip member of size bytes. what names it
 * in messages ("'w.npy'"). DVAR_ECORRUPT for a damaged or truncated file,
 * DVAR_ENOTSUPP for what dvar cannot hold.
 */
int dvar_npy_parse(const char *what, const void *buf, size_t len, uint64_t size,
                   dvar_npy_info *out);

DVAR_END_DECL

#endif
