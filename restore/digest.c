/*
 * restore/digest.c - dvar_reader_digest: the CRC-32C of a variable's logical
 * value. When the saved slices lie back to back in row-major order it is
 * combined from the chunk checksums the index holds (they are over raw
 * bytes, compressed or not), so no data is read; otherwise, and for
 * TensorFlow checkpoints, the value is read in bounded pieces and hashed.
 * docs/FORMAT.md, "Digests".
 */
#include <stdlib.h>

#include "format/format.h"
#include "restore/restore.h"

static int by_first_row(const void *a, const void *b)
{
	const dvar_slice_entry *x = *(const dvar_slice_entry *const *)a;
	const dvar_slice_entry *y = *(const dvar_slice_entry *const *)b;
	return (x->slice.start[0] > y->slice.start[0]) - (x->slice.start[0] < y->slice.start[0]);
}

static int slice_is_empty(const dvar_slice *s)
{
	for (int d = 0; d < s->rank; d++)
		if (s->length[d] == 0)
			return 1;
	return 0;
}

/*
 * The slices of v in row order when they tile its logical bytes: every one
 * non-empty, covering every column, starting where the previous ended, and
 * together every row. order (v->num_slices entries) receives them; *n their
 * count. 0 when they do not tile it (column slices, gaps, overlaps).
 */
static int tiling(const dvar_var_entry *v, const dvar_slice_entry **order, size_t *n)
{
	*n = 0;
	for (size_t j = 0; j < v->num_slices; j++) {
		const dvar_slice *s = &v->slices[j].slice;
		if (slice_is_empty(s))
			continue;
		for (int d = 1; d < s->rank; d++)
			if (s->start[d] != 0 || s->length[d] != v->shape.dims[d])
				return 0;
		order[(*n)++] = &v->slices[j];
	}
	if (v->shape.rank == 0)
		return *n == 1;
	qsort(order, *n, sizeof(*order), by_first_row);
	int64_t next = 0;
	for (size_t k = 0; k < *n; k++) {
		if (order[k]->slice.start[0] != next)
			return 0;
		next += order[k]->slice.length[0];
	}
	return next == v->shape.dims[0];
}

/* The chunks' checksums, slice after slice, as one CRC of their raw bytes. */
static uint32_t combine(const dvar_slice_entry *const *order, size_t n)
{
	uint32_t crc = 0;
	for (size_t k = 0; k < n; k++)
		for (size_t c = 0; c < order[k]->num_chunks; c++)
			crc = dvar_crc32c_combine(crc, order[k]->chunks[c].crc,
			                          dvar_chunk_raw_len(order[k], c));
	return crc;
}

static int extend(void *ctx, const void *data, uint64_t bytes)
{
	uint32_t *crc = ctx;
	*crc = dvar_crc32c_extend(*crc, data, (size_t)bytes);
	return DVAR_OK;
}

/* Read the whole value in bounded pieces, hashing each in order. */
static int read_digest(dvar_reader *r, size_t i, const dvar_var_entry *v, uint32_t *crc)
{
	dvar_op op;
	dvar_copier c;
	dvar_slice all;

	dvar_op_init(&op, NULL, 0);
	dvar_copier_init(&c, &op);
	dvar_slice_full(&all, &v->shape);
	*crc = 0;
	int rc = dvar_copy_pieces(&c, r, i, v->dtype, &all, extend, crc);
	dvar_copier_free(&c);
	return rc;
}

int dvar_reader_digest(dvar_reader *r, size_t i, uint32_t *crc)
{
	const dvar_var_entry *v = r && crc ? dvar_reader_entry(r, i) : NULL;
	uint64_t elems;
	int rc;

	if (!v)
		return dvar_error_set(DVAR_EINVAL, "dvar_reader_digest: %s", !r || !crc ?
		                      "NULL argument" : "variable index out of range");
	if (v->dtype == DVAR_DTYPE_STRING)
		return dvar_error_set(DVAR_ENOTSUPP, "variable '%s' is a string tensor: digests "
		                      "cover numeric tensors only", v->name);
	if (!dvar_dtype_size(v->dtype))
		return dvar_error_tf_dtype(v->name, v->dtype);
	if ((rc = dvar_shape_num_elements(&v->shape, &elems)) != DVAR_OK)
		return dvar_error_prefix("variable '%s'", v->name);
	if (elems == 0) {
		*crc = 0; /* the CRC of no bytes */
		return DVAR_OK;
	}
	/* A TensorFlow checkpoint is read: its checksums were computed by another
	 * program, and a digest that proves a conversion should rest on the bytes
	 * (each entry's checksum is checked as it is read). */
	if (!dvar_reader_is_tf(r)) {
		const dvar_slice_entry **order = malloc((v->num_slices ? v->num_slices : 1) *
		                                        sizeof(*order));
		size_t n;
		if (!order)
			return dvar_error_set(DVAR_ENOMEM, "variable '%s': out of memory", v->name);
		int tiles = tiling(v, order, &n);
		if (tiles)
			*crc = combine(order, n);
		free(order);
		if (tiles)
			return DVAR_OK;
	}
	return read_digest(r, i, v, crc);
}
