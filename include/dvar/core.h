/*
 * dvar/core.h - dtypes, shapes and slices (hyperrectangles of a shape).
 *
 * Everything here works on caller-owned plain structs; nothing allocates.
 * Tensors are row-major and little-endian, as on disk.
 */
#ifndef DVAR_CORE_H
#define DVAR_CORE_H

#include "common.h"

DVAR_BEGIN_DECL

/**
 * Element types. The values are TensorFlow's DataType enum values, so a dtype
 * read from a dvar checkpoint means the same number in a TensorBundle.
 */
typedef enum {
	DVAR_FLOAT32 = 1,
	DVAR_FLOAT64 = 2,
	DVAR_INT32 = 3,
	DVAR_UINT8 = 4,
	DVAR_INT16 = 5,
	DVAR_INT8 = 6,
	DVAR_INT64 = 9,
	DVAR_BOOL = 10,
	DVAR_BFLOAT16 = 14,
	DVAR_UINT16 = 17,
	DVAR_FLOAT16 = 19,
	DVAR_UINT32 = 22,
	DVAR_UINT64 = 23
} dvar_dtype;

/** Bytes per element, or 0 when dtype is not a dvar_dtype. */
DVAR_EXTERN(size_t) dvar_dtype_size(int dtype);

/** "float32", "bfloat16", "bool", ...; NULL when dtype is not a dvar_dtype. */
DVAR_EXTERN(const char *) dvar_dtype_name(int dtype);

/** Parse a name dvar_dtype_name returns. DVAR_EINVAL for an unknown name. */
DVAR_EXTERN(int) dvar_dtype_from_name(dvar_dtype *out, const char *name);

/**
 * Convert n elements of dtype at src to doubles (bool -> 0/1, float16 and
 * bfloat16 widened exactly, 64-bit integers rounded to nearest double).
 */
DVAR_EXTERN(int) dvar_dtype_to_f64(double *dst, int dtype, const void *src, size_t n);

#define DVAR_MAX_RANK 8

/** A shape: rank 0..DVAR_MAX_RANK, each dimension >= 0. */
typedef struct {
	int32_t rank;
	int64_t dims[DVAR_MAX_RANK];
} dvar_shape;

/** Fill out from rank and dims, checking 0 <= rank <= 8 and dims >= 0. */
DVAR_EXTERN(int) dvar_shape_init(dvar_shape *out, int32_t rank, const int64_t *dims);

/** Number of elements; DVAR_EINVAL (with the shape in the message) on overflow. */
DVAR_EXTERN(int) dvar_shape_num_elements(const dvar_shape *shape, uint64_t *out);

/** Number of bytes of a dense tensor; DVAR_EINVAL on overflow or a bad dtype. */
DVAR_EXTERN(int) dvar_shape_num_bytes(const dvar_shape *shape, int dtype, uint64_t *out);

/** 1 when a and b have the same rank and dimensions, else 0. */
DVAR_EXTERN(int) dvar_shape_equal(const dvar_shape *a, const dvar_shape *b);

/**
 * Write "[3,2]" ("[]" for rank 0) into buf; always NUL-terminates when cap > 0.
 * @return the length the full text needs, like snprintf.
 */
DVAR_EXTERN(size_t) dvar_shape_format(const dvar_shape *shape, char *buf, size_t cap);

/**
 * A hyperrectangle of a full shape: for each dimension a start and a length.
 * A rank-0 slice is the single element of a scalar.
 */
typedef struct {
	int32_t rank;
	int64_t start[DVAR_MAX_RANK];
	int64_t length[DVAR_MAX_RANK];
} dvar_slice;

/** The slice that covers all of shape. */
DVAR_EXTERN(void) dvar_slice_full(dvar_slice *out, const dvar_shape *shape);

/** 1 when slice covers all of shape, else 0. */
DVAR_EXTERN(int) dvar_slice_is_full(const dvar_slice *slice, const dvar_shape *shape);

/** The shape of the slice's own tensor (its lengths). */
DVAR_EXTERN(void) dvar_slice_shape(const dvar_slice *slice, dvar_shape *out);

/**
 * Check that slice lies inside shape (same rank, start >= 0, length >= 0,
 * start + length <= dim). DVAR_ESHAPE with both in the message otherwise.
 */
DVAR_EXTERN(int) dvar_slice_check(const dvar_slice *slice, const dvar_shape *shape);

/**
 * Parse TensorFlow's slice text against a full shape: one "start,length" or
 * "-" (the whole dimension) per dimension, separated by ':' ("0,2:-").
 * A scalar's slice is "" (or "-"). The result is checked to lie in full.
 */
DVAR_EXTERN(int) dvar_slice_parse(dvar_slice *out, const char *spec, const dvar_shape *full);

/**
 * Parse NumPy's slice text against a full shape: per dimension "start:stop",
 * "start:", ":stop", ":" (all of it) or an index i (i:i+1, the dimension
 * kept), joined by ','; dimensions not given are whole ("5:7" of a [N,8]
 * table is rows 5 and 6). Negative numbers count from the end, as NumPy's;
 * unlike NumPy's, a bound outside the dimension is an error (DVAR_ESHAPE),
 * not clipped, and steps are refused.
 */
DVAR_EXTERN(int) dvar_slice_parse_numpy(dvar_slice *out, const char *spec,
                                        const dvar_shape *full);

/**
 * Either text: TensorFlow's (dvar_slice_parse) when spec is "" or every
 * ':'-separated part is "-" or has one ',' and no '-' ("0,2:-", "1,2"),
 * NumPy's (dvar_slice_parse_numpy) otherwise ("1:3", "0:2,:", "7", "-1,-1").
 */
DVAR_EXTERN(int) dvar_slice_parse_any(dvar_slice *out, const char *spec, const dvar_shape *full);

/**
 * Write TensorFlow's slice text into buf: "-" for a dimension the slice
 * covers whole in full (full may be NULL: then every dimension is written as
 * "start,length"). Always NUL-terminates when cap > 0.
 * @return the length the full text needs, like snprintf.
 */
DVAR_EXTERN(size_t) dvar_slice_format(const dvar_slice *slice, const dvar_shape *full,
                                      char *buf, size_t cap);

/**
 * Intersect two slices of the same rank.
 * @return 1 when the intersection is non-empty (written to out), 0 when it is
 *         empty, DVAR_EINVAL when the ranks differ.
 */
DVAR_EXTERN(int) dvar_slice_intersect(const dvar_slice *a, const dvar_slice *b, dvar_slice *out);

/** Number of elements in a slice (checked for overflow). */
DVAR_EXTERN(int) dvar_slice_num_elements(const dvar_slice *slice, uint64_t *out);

/**
 * Copy the elements of region from a row-major buffer holding src_slice to a
 * row-major buffer holding dst_slice (all three are slices of the same full
 * shape; region must lie inside both). This is the primitive every reshard,
 * partial read and restore is built on.
 */
DVAR_EXTERN(int) dvar_slice_copy(int dtype, const dvar_slice *region,
                                 const void *src, const dvar_slice *src_slice,
                                 void *dst, const dvar_slice *dst_slice);

/**
 * Walks a slice in row-major pieces of at most max_elems elements, so that a
 * variable of any size is read (or written) with bounded memory: the dims
 * before `axis` advance one index at a time, `axis` in runs, the dims after
 * it whole. Concatenated, the pieces are the slice in row-major order; each
 * is itself a slice (one dvar_reader_read). The fields are the walk's own.
 */
typedef struct {
	dvar_slice region;
	int axis;
	int64_t run;
	int64_t idx[DVAR_MAX_RANK];
	int done;
} dvar_slice_walk;

/** Start walking region in pieces of at most max_elems (>= 1) elements. */
DVAR_EXTERN(void) dvar_slice_walk_init(dvar_slice_walk *w, const dvar_slice *region,
                                       uint64_t max_elems);

/** The next piece and its element count: 1, or 0 when the walk is over. */
DVAR_EXTERN(int) dvar_slice_walk_next(dvar_slice_walk *w, dvar_slice *piece,
                                      uint64_t *num_elems);

/**
 * CRC-32C (Castagnoli) of len bytes at buf, continuing from crc (0 to
 * start): the checksum dvar keeps of every chunk, for programs that compare
 * values with what a checkpoint holds. SSE4.2 when the CPU has it.
 */
DVAR_EXTERN(uint32_t) dvar_crc32c_extend(uint32_t crc, const void *buf, size_t len);

DVAR_END_DECL

#endif
