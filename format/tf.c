/*
 * format/tf.c - TensorFlow's TensorBundle at the level of bytes (format/tf.h;
 * ../shared/reference/tf-behavior.md §4): a small protobuf wire-format
 * decoder and encoder for the index's messages, OrderedCode slice keys,
 * masked CRC-32C, string tensors, locating a bundle through the `checkpoint`
 * state file (parsed by state.c), and opening a bundle's index as dvar's
 * in-memory entries.
 *
 * Nothing here trusts its input: every read stays inside the bytes given,
 * every allocation is bounded by what those bytes can justify (dimensions
 * by DVAR_MAX_RANK, slices by TF_MAX_SLICES, arrays by the bytes left), and
 * every failure is a status with a message saying what and where.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/tf.h"

/* A partitioned tensor with more slices than this is refused (bounds memory). */
#define TF_MAX_SLICES 100000u

/* ---------------------------------------------------------------- checksums */

uint32_t dvar_tf_crc_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + DVAR_TF_MASK_DELTA;
}

uint32_t dvar_tf_crc_unmask(uint32_t masked)
{
	uint32_t rot = masked - DVAR_TF_MASK_DELTA;
	return (rot >> 17) | (rot << 15);
}

/* ---------------------------------------------------------------- dtypes */

const char *dvar_tf_dtype_name(int dtype)
{
	static const char *const names[] = {
		[1] = "float", [2] = "double", [3] = "int32", [4] = "uint8", [5] = "int16",
		[6] = "int8", [7] = "string", [8] = "complex64", [9] = "int64", [10] = "bool",
		[11] = "qint8", [12] = "quint8", [13] = "qint32", [14] = "bfloat16",
		[15] = "qint16", [16] = "quint16", [17] = "uint16", [18] = "complex128",
		[19] = "half", [20] = "resource", [21] = "variant", [22] = "uint32",
		[23] = "uint64", [24] = "float8_e5m2", [25] = "float8_e4m3fn",
		[26] = "float8_e4m3fnuz", [27] = "float8_e4m3b11fnuz", [28] = "float8_e5m2fnuz",
		[29] = "int4", [30] = "uint4",
	};
	if (dtype > 0 && (size_t)dtype < sizeof(names) / sizeof(names[0]))
		return names[dtype];
	return NULL;
}

size_t dvar_tf_dtype_size(int dtype)
{
	size_t s = dvar_dtype_size(dtype);
	if (s)
		return s;
	switch (dtype) {
	case 8: return 8;    /* complex64 */
	case 18: return 16;  /* complex128 */
	case 11: case 12: return 1;   /* qint8, quint8 */
	case 15: case 16: return 2;   /* qint16, quint16 */
	case 13: return 4;   /* qint32 */
	case 24: case 25: case 26: case 27: case 28: case 29: case 30: return 1; /* float8s, int4s */
	default: return 0;
	}
}

/* ---------------------------------------------------------------- wire format */

enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_FIXED32 = 5 };

typedef struct {
	const unsigned char *p, *end;
	const char *what;   /* "index entry 'w'" */
} pb;

static int pb_error(const pb *b, uint32_t field, const char *name, const char *why)
{
	if (field)
		return dvar_error_set(DVAR_ECORRUPT, "%s: field %u (%s): %s", b->what, field, name, why);
	return dvar_error_set(DVAR_ECORRUPT, "%s: %s", b->what, why);
}

/* 0, or -1 truncated, -2 longer than 10 bytes / more than 64 bits. */
static int get_varint(const unsigned char **pp, const unsigned char *end, uint64_t *out)
{
	const unsigned char *p = *pp;
	uint64_t v = 0;
	for (int i = 0; i < 10; i++) {
		if (p == end)
			return -1;
		unsigned char c = *p++;
		if (i == 9 && c > 1)
			return -2;
		v |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			*out = v;
			*pp = p;
			return 0;
		}
	}
	return -2;
}

static int pb_varint(pb *b, uint64_t *out, uint32_t field, const char *name)
{
	int e = get_varint(&b->p, b->end, out);
	if (e == -1)
		return pb_error(b, field, name, "truncated varint");
	if (e == -2)
		return pb_error(b, field, name, "malformed varint (more than 10 bytes or 64 bits)");
	return DVAR_OK;
}

static int pb_tag(pb *b, uint32_t *field, int *wt)
{
	uint64_t t;
	int e = get_varint(&b->p, b->end, &t);
	if (e)
		return pb_error(b, 0, NULL, e == -1 ? "truncated field tag" : "malformed field tag");
	*field = (uint32_t)(t >> 3);
	*wt = (int)(t & 7);
	if (t >> 3 == 0 || t >> 3 > 0x1fffffff)
		return pb_error(b, 0, NULL, "bad field number in tag");
	if (*wt == WT_SGROUP || *wt == WT_EGROUP)
		return pb_error(b, *field, "?", "group wire type is not supported");
	if (*wt > WT_FIXED32)
		return pb_error(b, *field, "?", "invalid wire type");
	return DVAR_OK;
}

static int pb_skip(pb *b, uint32_t field, int wt)
{
	uint64_t v;
	size_t left = (size_t)(b->end - b->p);
	switch (wt) {
	case WT_VARINT:
		return pb_varint(b, &v, field, "unknown");
	case WT_FIXED64:
		if (left < 8)
			return pb_error(b, field, "unknown", "truncated fixed64");
		b->p += 8;
		return DVAR_OK;
	case WT_FIXED32:
		if (left < 4)
			return pb_error(b, field, "unknown", "truncated fixed32");
		b->p += 4;
		return DVAR_OK;
	default: {
		int rc = pb_varint(b, &v, field, "unknown");
		if (rc)
			return rc;
		if (v > (uint64_t)(b->end - b->p))
			return pb_error(b, field, "unknown", "length exceeds the bytes left");
		b->p += v;
		return DVAR_OK;
	}
	}
}

static int pb_want(pb *b, uint32_t field, const char *name, int wt, int want)
{
	if (wt != want) {
		char why[64];
		snprintf(why, sizeof(why), "wire type %d, expected %d", wt, want);
		return pb_error(b, field, name, why);
	}
	return DVAR_OK;
}

static int pb_int64(pb *b, uint32_t field, const char *name, int wt, int64_t *out)
{
	uint64_t v;
	int rc = pb_want(b, field, name, wt, WT_VARINT);
	if (!rc && !(rc = pb_varint(b, &v, field, name)))
		*out = (int64_t)v;
	return rc;
}

static int pb_int32(pb *b, uint32_t field, const char *name, int wt, int32_t *out)
{
	int64_t v;
	int rc = pb_int64(b, field, name, wt, &v);
	if (rc)
		return rc;
	if (v < INT32_MIN || v > INT32_MAX)
		return pb_error(b, field, name, "value out of range for int32");
	*out = (int32_t)v;
	return DVAR_OK;
}

/* A length-delimited field's bytes as a sub-reader (same what). */
static int pb_sub(pb *b, uint32_t field, const char *name, int wt, pb *sub)
{
	uint64_t len;
	int rc = pb_want(b, field, name, wt, WT_LEN);
	if (!rc)
		rc = pb_varint(b, &len, field, name);
	if (rc)
		return rc;
	if (len > (uint64_t)(b->end - b->p)) {
		char why[96];
		snprintf(why, sizeof(why), "length %llu exceeds the %zu bytes left",
		         (unsigned long long)len, (size_t)(b->end - b->p));
		return pb_error(b, field, name, why);
	}
	sub->p = b->p;
	sub->end = b->p + len;
	sub->what = b->what;
	b->p += len;
	return DVAR_OK;
}

static int put_tag(dvar_bytes *o, uint32_t field, int wt)
{
	return dvar_bytes_put_varint(o, (uint64_t)field << 3 | (uint64_t)wt);
}

/* A varint field (int32 / int64 / enum: negative values sign-extended to 10 bytes). */
static int put_int(dvar_bytes *o, uint32_t field, int64_t v)
{
	int rc = put_tag(o, field, WT_VARINT);
	return rc ? rc : dvar_bytes_put_varint(o, (uint64_t)v);
}

static int put_int_nz(dvar_bytes *o, uint32_t field, int64_t v)
{
	return v ? put_int(o, field, v) : DVAR_OK;
}

static int put_len(dvar_bytes *o, uint32_t field, const dvar_bytes *msg)
{
	int rc = put_tag(o, field, WT_LEN);
	if (!rc)
		rc = dvar_bytes_put_varint(o, msg->len);
	return rc ? rc : dvar_bytes_put(o, msg->data, msg->len);
}

/* ---------------------------------------------------------------- header */

void dvar_tf_header_clear(dvar_tf_header *h)
{
	free(h->bad_consumers);
	memset(h, 0, sizeof(*h));
}

static int version_decode(pb *b, dvar_tf_header *h)
{
	size_t cap = h->num_bad_consumers;
	int rc = DVAR_OK;
	while (!rc && b->p < b->end) {
		uint32_t f;
		int wt;
		if ((rc = pb_tag(b, &f, &wt)))
			break;
		if (f == 1) {
			rc = pb_int32(b, f, "version.producer", wt, &h->producer);
		} else if (f == 2) {
			rc = pb_int32(b, f, "version.min_consumer", wt, &h->min_consumer);
		} else if (f == 3) {
			/* repeated int32: packed (proto3's default) or one value per tag */
			static const char name[] = "version.bad_consumers";
			int packed = wt == WT_LEN, first = 1;
			pb src = { 0 };
			if (packed)
				rc = pb_sub(b, f, name, wt, &src);
			else
				rc = pb_want(b, f, name, wt, WT_VARINT);
			while (!rc && (packed ? src.p < src.end : first)) {
				int32_t v = 0;
				first = 0;
				if ((rc = pb_int32(packed ? &src : b, f, name, WT_VARINT, &v)))
					break;
				int32_t *np = dvar_tf_grow(h->bad_consumers, h->num_bad_consumers, &cap,
				                           sizeof(int32_t), 4);
				if (!np) {
					rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
					break;
				}
				h->bad_consumers = np;
				h->bad_consumers[h->num_bad_consumers++] = v;
			}
		} else {
			rc = pb_skip(b, f, wt);
		}
	}
	return rc;
}

int dvar_tf_header_decode(dvar_tf_header *out, const void *p, size_t n)
{
	pb b = { p, (const unsigned char *)p + n, "index header (BundleHeaderProto)" };
	int rc = DVAR_OK;
	memset(out, 0, sizeof(*out));
	if (n && !p)
		return dvar_error_set(DVAR_EINVAL, "dvar_tf_header_decode: NULL bytes");
	while (!rc && b.p < b.end) {
		uint32_t f;
		int wt;
		pb sub;
		if ((rc = pb_tag(&b, &f, &wt)))
			break;
		switch (f) {
		case 1: rc = pb_int32(&b, f, "num_shards", wt, &out->num_shards); break;
		case 2: rc = pb_int32(&b, f, "endianness", wt, &out->endianness); break;
		case 3:
			if (!(rc = pb_sub(&b, f, "version", wt, &sub)))
				rc = version_decode(&sub, out);
			break;
		default: rc = pb_skip(&b, f, wt); break;
		}
	}
	if (rc)
		dvar_tf_header_clear(out);
	return rc;
}

int dvar_tf_header_encode(dvar_bytes *out, const dvar_tf_header *h)
{
	dvar_bytes v = { 0 }, packed = { 0 };
	int rc = put_int_nz(out, 1, h->num_shards);
	if (!rc) rc = put_int_nz(out, 2, h->endianness);
	if (!rc) rc = put_int_nz(&v, 1, h->producer);
	if (!rc) rc = put_int_nz(&v, 2, h->min_consumer);
	for (size_t i = 0; !rc && i < h->num_bad_consumers; i++)
		rc = dvar_bytes_put_varint(&packed, (uint64_t)(int64_t)h->bad_consumers[i]);
	if (!rc && h->num_bad_consumers)
		rc = put_len(&v, 3, &packed);
	/* The writer always sets version, so it is always present. */
	if (!rc) rc = put_len(out, 3, &v);
	free(v.data);
	free(packed.data);
	return rc;
}

int dvar_tf_header_check(const dvar_tf_header *h, const char *what)
{
	/* TensorFlow's CheckVersions(versions, kTensorBundleVersion, kTensorBundleMinProducer). */
	if (h->producer < 0)
		return dvar_error_set(DVAR_EVERSION, "%s: Checkpoint producer version %d below min producer 0 "
		                      "supported by TensorFlow (dvar reads TensorBundle versions 0 to %d)",
		                      what, h->producer, DVAR_TF_BUNDLE_VERSION);
	if (h->min_consumer > DVAR_TF_BUNDLE_VERSION)
		return dvar_error_set(DVAR_EVERSION, "%s: Checkpoint min consumer version %d above current "
		                      "version %d for TensorFlow (dvar reads TensorBundle version %d)", what,
		                      h->min_consumer, DVAR_TF_BUNDLE_VERSION, DVAR_TF_BUNDLE_VERSION);
	for (size_t i = 0; i < h->num_bad_consumers; i++)
		if (h->bad_consumers[i] == DVAR_TF_BUNDLE_VERSION)
			return dvar_error_set(DVAR_EVERSION, "%s: Checkpoint disallows consumer version %d.  "
			                      "Please upgrade TensorFlow: this version is likely buggy.", what,
			                      DVAR_TF_BUNDLE_VERSION);
	if (h->endianness == 1)
		return dvar_error_set(DVAR_ENOTSUPP, "%s is a big-endian TensorBundle (written on a "
		                      "big-endian machine); dvar reads only little-endian bundles", what);
	if (h->endianness != 0)
		return dvar_error_set(DVAR_ECORRUPT, "%s: header has an unknown endianness %d", what,
		                      h->endianness);
	if (h->num_shards < 1 || h->num_shards > DVAR_MAX_PARTS + 1)
		return dvar_error_set(DVAR_ECORRUPT, "%s: header says %d data files (shards); expected 1 "
		                      "to %d", what, h->num_shards, DVAR_MAX_PARTS + 1);
	return DVAR_OK;
}

/* ---------------------------------------------------------------- entries */

void dvar_tf_entry_clear(dvar_tf_entry *e)
{
	free(e->slices);
	memset(e, 0, sizeof(*e));
}

static int shape_decode(pb *b, dvar_shape *shape)
{
	int rc = DVAR_OK;
	while (!rc && b->p < b->end) {
		uint32_t f;
		int wt;
		pb dim;
		if ((rc = pb_tag(b, &f, &wt)))
			break;
		if (f == 2) {
			if ((rc = pb_sub(b, f, "shape.dim", wt, &dim)))
				break;
			if (shape->rank == DVAR_MAX_RANK)
				return dvar_error_set(DVAR_ENOTSUPP, "%s: the tensor has more than %d dimensions; "
				                      "dvar handles tensors of rank up to %d", b->what,
				                      DVAR_MAX_RANK, DVAR_MAX_RANK);
			int64_t size = 0;
			while (!rc && dim.p < dim.end) {
				uint32_t g;
				int dwt;
				if ((rc = pb_tag(&dim, &g, &dwt)))
					break;
				if (g == 1)
					rc = pb_int64(&dim, g, "shape.dim.size", dwt, &size);
				else
					rc = pb_skip(&dim, g, dwt); /* name */
			}
			if (!rc && size < 0)
				rc = pb_error(b, f, "shape.dim.size", "negative (unknown) dimension");
			if (!rc)
				shape->dims[shape->rank++] = size;
		} else if (f == 3) {
			uint64_t v;
			if (!(rc = pb_want(b, f, "shape.unknown_rank", wt, WT_VARINT)) &&
			    !(rc = pb_varint(b, &v, f, "shape.unknown_rank")) && v)
				rc = pb_error(b, f, "shape.unknown_rank", "the shape's rank is unknown");
		} else {
			rc = pb_skip(b, f, wt);
		}
	}
	return rc;
}

static int slice_decode(pb *b, dvar_tf_slice *s)
{
	int rc = DVAR_OK;
	memset(s, 0, sizeof(*s));
	while (!rc && b->p < b->end) {
		uint32_t f;
		int wt;
		pb ext;
		if ((rc = pb_tag(b, &f, &wt)))
			break;
		if (f != 1) {
			rc = pb_skip(b, f, wt);
			continue;
		}
		if ((rc = pb_sub(b, f, "slices.extent", wt, &ext)))
			break;
		if (s->rank == DVAR_MAX_RANK)
			return pb_error(b, f, "slices.extent", "a slice of more than 8 dimensions");
		int64_t start = 0, length = -1;
		while (!rc && ext.p < ext.end) {
			uint32_t g;
			int ewt;
			if ((rc = pb_tag(&ext, &g, &ewt)))
				break;
			if (g == 1) {
				rc = pb_int64(&ext, g, "slices.extent.start", ewt, &start);
				if (!rc && start < 0)
					rc = pb_error(b, g, "slices.extent.start", "negative start");
			} else if (g == 2) {
				rc = pb_int64(&ext, g, "slices.extent.length", ewt, &length);
				if (!rc && length < 0)
					rc = pb_error(b, g, "slices.extent.length", "negative length");
			} else {
				rc = pb_skip(&ext, g, ewt);
			}
		}
		s->start[s->rank] = start;
		s->length[s->rank] = length;
		s->rank++;
	}
	return rc;
}

int dvar_tf_entry_decode(dvar_tf_entry *out, const void *p, size_t n, const char *what)
{
	char w[DVAR_MAX_NAME + 64];
	snprintf(w, sizeof(w), "index entry '%s'", what ? what : "?");
	pb b = { p, (const unsigned char *)p + n, w };
	size_t cap = 0;
	int rc = DVAR_OK;
	memset(out, 0, sizeof(*out));
	if (n && !p)
		return dvar_error_set(DVAR_EINVAL, "dvar_tf_entry_decode: NULL bytes");
	while (!rc && b.p < b.end) {
		uint32_t f;
		int wt;
		pb sub;
		if ((rc = pb_tag(&b, &f, &wt)))
			break;
		switch (f) {
		case 1: rc = pb_int32(&b, f, "dtype", wt, &out->dtype); break;
		case 2:
			if (!(rc = pb_sub(&b, f, "shape", wt, &sub)))
				rc = shape_decode(&sub, &out->shape);
			break;
		case 3: rc = pb_int32(&b, f, "shard_id", wt, &out->shard_id); break;
		case 4: rc = pb_int64(&b, f, "offset", wt, &out->offset); break;
		case 5: rc = pb_int64(&b, f, "size", wt, &out->size); break;
		case 6:
			if (!(rc = pb_want(&b, f, "crc32c", wt, WT_FIXED32))) {
				if (b.end - b.p < 4) {
					rc = pb_error(&b, f, "crc32c", "truncated fixed32");
					break;
				}
				out->crc32c = (uint32_t)b.p[0] | (uint32_t)b.p[1] << 8 |
				              (uint32_t)b.p[2] << 16 | (uint32_t)b.p[3] << 24;
				b.p += 4;
			}
			break;
		case 7:
			if ((rc = pb_sub(&b, f, "slices", wt, &sub)))
				break;
			if (out->num_slices == TF_MAX_SLICES) {
				rc = dvar_error_set(DVAR_ENOTSUPP, "%s lists more than %u slices", w, TF_MAX_SLICES);
				break;
			}
			dvar_tf_slice *s = dvar_tf_grow(out->slices, out->num_slices, &cap, sizeof(*s), 4);
			if (!s) {
				rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
				break;
			}
			out->slices = s;
			if (!(rc = slice_decode(&sub, &out->slices[out->num_slices])))
				out->num_slices++;
			break;
		default: rc = pb_skip(&b, f, wt); break;
		}
	}
	if (!rc) {
		if (out->dtype <= 0)
			rc = dvar_error_set(DVAR_ECORRUPT, "%s: dtype %d is not a data type", w, out->dtype);
		else if (out->shard_id < 0 || out->offset < 0 || out->size < 0)
			rc = dvar_error_set(DVAR_ECORRUPT, "%s: negative shard_id %d, offset %lld or size %lld",
			                    w, out->shard_id, (long long)out->offset, (long long)out->size);
	}
	if (rc)
		dvar_tf_entry_clear(out);
	return rc;
}

static int slice_encode(dvar_bytes *out, const dvar_tf_slice *s)
{
	dvar_bytes ext = { 0 };
	int rc = DVAR_OK;
	for (int d = 0; !rc && d < s->rank; d++) {
		ext.len = 0;
		/* Full dimension: an empty Extent; else start (omitted when 0) and length (always). */
		if (s->length[d] >= 0) {
			rc = put_int_nz(&ext, 1, s->start[d]);
			if (!rc) rc = put_int(&ext, 2, s->length[d]);
		}
		if (!rc) rc = put_len(out, 1, &ext);
	}
	free(ext.data);
	return rc;
}

int dvar_tf_entry_encode(dvar_bytes *out, const dvar_tf_entry *e)
{
	dvar_bytes shape = { 0 }, dim = { 0 }, sl = { 0 };
	int rc = put_int_nz(out, 1, e->dtype);
	for (int d = 0; !rc && d < e->shape.rank; d++) {
		dim.len = 0;
		rc = put_int_nz(&dim, 1, e->shape.dims[d]);
		if (!rc) rc = put_len(&shape, 2, &dim);
	}
	if (!rc) rc = put_len(out, 2, &shape);   /* always present, even for scalars */
	if (!rc) rc = put_int_nz(out, 3, e->shard_id);
	if (!rc) rc = put_int_nz(out, 4, e->offset);
	if (!rc) rc = put_int_nz(out, 5, e->size);
	if (!rc && e->crc32c) {
		unsigned char c[4] = { (unsigned char)e->crc32c, (unsigned char)(e->crc32c >> 8),
		                       (unsigned char)(e->crc32c >> 16), (unsigned char)(e->crc32c >> 24) };
		rc = put_tag(out, 6, WT_FIXED32);
		if (!rc) rc = dvar_bytes_put(out, c, 4);
	}
	for (size_t i = 0; !rc && i < e->num_slices; i++) {
		sl.len = 0;
		rc = slice_encode(&sl, &e->slices[i]);
		if (!rc) rc = put_len(out, 7, &sl);
	}
	free(shape.data);
	free(dim.data);
	free(sl.data);
	return rc;
}

int dvar_tf_slice_resolve(const dvar_tf_slice *t, const dvar_shape *shape, dvar_slice *out,
                          const char *what)
{
	memset(out, 0, sizeof(*out));
	if (t->rank != shape->rank)
		return dvar_error_set(DVAR_ECORRUPT, "%s: a slice of rank %d of a tensor of rank %d", what,
		                      t->rank, shape->rank);
	out->rank = t->rank;
	for (int d = 0; d < t->rank; d++) {
		if (t->length[d] < 0) {
			if (t->start[d] != 0 || t->length[d] != -1)
				return dvar_error_set(DVAR_ECORRUPT, "%s: dimension %d of a slice is full but "
				                      "starts at %lld", what, d, (long long)t->start[d]);
			out->start[d] = 0;
			out->length[d] = shape->dims[d];
		} else {
			if (t->start[d] < 0 || t->start[d] > shape->dims[d] ||
			    t->length[d] > shape->dims[d] - t->start[d])
				return dvar_error_set(DVAR_ECORRUPT, "%s: extent %lld,%lld in dimension %d lies "
				                      "outside the tensor's %lld", what, (long long)t->start[d],
				                      (long long)t->length[d], d, (long long)shape->dims[d]);
			out->start[d] = t->start[d];
			out->length[d] = t->length[d];
		}
	}
	return DVAR_OK;
}

void dvar_tf_slice_from(const dvar_slice *s, const dvar_shape *shape, dvar_tf_slice *out)
{
	memset(out, 0, sizeof(*out));
	out->rank = s->rank;
	for (int d = 0; d < s->rank; d++) {
		if (s->start[d] == 0 && d < shape->rank && s->length[d] == shape->dims[d]) {
			out->start[d] = 0;
			out->length[d] = -1;
		} else {
			out->start[d] = s->start[d];
			out->length[d] = s->length[d];
		}
	}
}

/* ---------------------------------------------------------------- OrderedCode keys */

static int put_num_increasing(dvar_bytes *o, uint64_t v)
{
	unsigned char buf[9];
	int n = 0;
	for (uint64_t x = v; x; x >>= 8)
		n++;
	buf[0] = (unsigned char)n;
	for (int i = 0; i < n; i++)
		buf[1 + i] = (unsigned char)(v >> (8 * (n - 1 - i)));
	return dvar_bytes_put(o, buf, (size_t)n + 1);
}

static const unsigned char signed_hdr[11][2] = {
	{ 0, 0 }, { 0x80, 0 }, { 0xc0, 0 }, { 0xe0, 0 }, { 0xf0, 0 }, { 0xf8, 0 },
	{ 0xfc, 0 }, { 0xfe, 0 }, { 0xff, 0 }, { 0xff, 0x80 }, { 0xff, 0xc0 },
};

/* WriteSignedNumIncreasing into buf (10 bytes); returns the length. */
static int signed_encode(int64_t v, unsigned char *buf)
{
	uint64_t x = v < 0 ? ~(uint64_t)v : (uint64_t)v;
	if (x < 64) {
		buf[0] = (unsigned char)(0x80 ^ (uint64_t)v);
		return 1;
	}
	int bits = 0;
	for (uint64_t t = x; t; t >>= 1)
		bits++;
	int len = (bits + 7) / 7;   /* kBitsToLength: 7 bits per byte, one of them the sign */
	if (len < 2)
		len = 2;
	unsigned char ext[10];
	ext[0] = ext[1] = v < 0 ? 0xff : 0;
	for (int i = 0; i < 8; i++)
		ext[2 + i] = (unsigned char)((uint64_t)v >> (8 * (7 - i)));
	memcpy(buf, ext + 10 - len, (size_t)len);
	buf[0] ^= signed_hdr[len][0];
	buf[1] ^= signed_hdr[len][1];
	return len;
}

int dvar_tf__signed_encode(int64_t v, unsigned char *buf)
{
	return signed_encode(v, buf);
}

/* ReadSignedNumIncreasing; only canonical encodings are accepted. Returns the length or -1. */
int dvar_tf__signed_decode(const unsigned char *p, size_t n, int64_t *out)
{
	if (n == 0)
		return -1;
	unsigned char m = (p[0] & 0x80) ? 0 : 0xff;
	unsigned char c0 = p[0] ^ m;
	int len;
	if (c0 != 0xff) {
		len = 0;
		while (len < 8 && (c0 << len) & 0x80)
			len++;
	} else {
		if (n < 2)
			return -1;
		unsigned char c1 = p[1] ^ m;
		len = c1 < 0x80 ? 8 : c1 < 0xc0 ? 9 : 10;
	}
	if ((size_t)len > n)
		return -1;
	unsigned char orig[10] = { 0 };
	memcpy(orig, p, (size_t)len);
	orig[0] ^= signed_hdr[len][0];
	if (len > 1)
		orig[1] ^= signed_hdr[len][1];
	uint64_t acc = (orig[0] & 0x80) ? ~(uint64_t)0 : 0;
	for (int i = 0; i < len; i++)
		acc = acc << 8 | orig[i];
	int64_t v = (int64_t)acc;
	unsigned char re[10];
	if (signed_encode(v, re) != len || memcmp(re, p, (size_t)len) != 0)
		return -1;
	*out = v;
	return len;
}

static int put_signed(dvar_bytes *o, int64_t v)
{
	unsigned char buf[10];
	return dvar_bytes_put(o, buf, (size_t)signed_encode(v, buf));
}

int dvar_tf_slice_key_encode(dvar_bytes *out, const char *full_key, size_t full_len,
                             const dvar_tf_slice *slice)
{
	static const unsigned char esc0[2] = { 0x00, 0xff }, escf[2] = { 0xff, 0x00 },
	                           term[2] = { 0x00, 0x01 };
	const unsigned char *k = (const unsigned char *)full_key;
	int rc = put_num_increasing(out, 0);
	size_t run = 0;
	for (size_t i = 0; !rc && i <= full_len; i++) {
		if (i < full_len && k[i] != 0x00 && k[i] != 0xff)
			continue;
		rc = dvar_bytes_put(out, k + run, i - run);
		if (!rc && i < full_len)
			rc = dvar_bytes_put(out, k[i] ? escf : esc0, 2);
		run = i + 1;
	}
	if (!rc) rc = dvar_bytes_put(out, term, 2);
	if (!rc) rc = put_num_increasing(out, (uint64_t)slice->rank);
	for (int d = 0; !rc && d < slice->rank; d++) {
		int full = slice->length[d] < 0;
		rc = put_signed(out, full ? 0 : slice->start[d]);
		if (!rc) rc = put_signed(out, full ? -1 : slice->length[d]);
	}
	return rc;
}

/* ReadNumIncreasing, canonical only; returns bytes used or -1. */
static int num_increasing_decode(const unsigned char *p, size_t n, uint64_t *out)
{
	if (n == 0 || p[0] > 8 || (size_t)p[0] + 1 > n || (p[0] && p[1] == 0))
		return -1;
	uint64_t v = 0;
	for (int i = 0; i < p[0]; i++)
		v = v << 8 | p[1 + i];
	*out = v;
	return p[0] + 1;
}

/* Bytes as text for messages: printable ASCII as is, others as \xNN, "..." when cut. */
static void printable(const unsigned char *p, size_t n, char *buf, size_t cap)
{
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		int plain = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\';
		if (at + (plain ? 1 : 4) + 4 > cap) {
			memcpy(buf + at, "...", 3);
			at += 3;
			break;
		}
		if (plain)
			buf[at++] = (char)p[i];
		else
			at += (size_t)snprintf(buf + at, cap - at, "\\x%02x", p[i]);
	}
	buf[at] = '\0';
}

int dvar_tf_slice_key_decode(const void *key, size_t klen, char **full_key, size_t *full_len,
                             dvar_tf_slice *slice)
{
	const unsigned char *p = key, *end = p + klen;
	char shown[160];
	const char *why;
	uint64_t v;
	int u;
	*full_key = NULL;
	*full_len = 0;
	memset(slice, 0, sizeof(*slice));
	if (klen == 0 || p[0] != 0)
		return 0;
	printable(p, klen, shown, sizeof(shown));
	/* NumIncreasing(0) is the single byte 00. */
	p++;
	/* String: find the terminator, unescape into a buffer no longer than the escaped bytes. */
	char *name = malloc((size_t)(end - p) + 1);
	size_t nl = 0;
	if (!name)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (;;) {
		if (p == end) {
			why = "the tensor name is not terminated";
			goto bad;
		}
		if (*p == 0x00 || *p == 0xff) {
			if (end - p < 2) {
				why = "the tensor name ends in a broken escape";
				goto bad;
			}
			if (p[0] == 0x00 && p[1] == 0x01) {
				p += 2;
				break;
			}
			if (p[0] == 0x00 && p[1] == 0xff)
				name[nl++] = 0;
			else if (p[0] == 0xff && p[1] == 0x00)
				name[nl++] = (char)0xff;
			else {
				why = "the tensor name holds a bad escape";
				goto bad;
			}
			p += 2;
		} else {
			name[nl++] = (char)*p++;
		}
	}
	name[nl] = '\0';
	if ((u = num_increasing_decode(p, (size_t)(end - p), &v)) < 0) {
		why = "failed to parse the tensor rank";
		goto bad;
	}
	p += u;
	if (v == 0) {
		why = "Expecting positive rank of the tensor, got 0";
		goto bad;
	}
	if (v > DVAR_MAX_RANK) {
		why = "the slice has more than 8 dimensions";
		goto bad;
	}
	slice->rank = (int32_t)v;
	for (int d = 0; d < slice->rank; d++) {
		int64_t start, length;
		if ((u = dvar_tf__signed_decode(p, (size_t)(end - p), &start)) < 0) {
			why = "failed to parse start";
			goto bad;
		}
		p += u;
		if ((u = dvar_tf__signed_decode(p, (size_t)(end - p), &length)) < 0) {
			why = "failed to parse length";
			goto bad;
		}
		p += u;
		if (length < 0 ? (start != 0 || length != -1) : start < 0) {
			why = "a bad extent";
			goto bad;
		}
		slice->start[d] = length < 0 ? 0 : start;
		slice->length[d] = length < 0 ? -1 : length;
	}
	if (p != end) {
		why = "trailing bytes";
		goto bad;
	}
	*full_key = name;
	*full_len = nl;
	return 1;
bad:
	free(name);
	memset(slice, 0, sizeof(*slice));
	return dvar_error_set(DVAR_ECORRUPT, "index key '%s' is not a valid slice key: %s", shown, why);
}

/* ---------------------------------------------------------------- strings */

static uint32_t lengths_crc(uint64_t n, const uint64_t *lens)
{
	uint32_t crc = 0;
	for (uint64_t i = 0; i < n; i++) {
		unsigned char b[8];
		for (int k = 0; k < 8; k++)
			b[k] = (unsigned char)(lens[i] >> (8 * k));
		crc = dvar_crc32c_extend(crc, b, lens[i] <= UINT32_MAX ? 4 : 8);
	}
	return crc;
}

int dvar_tf_strings_decode(const void *p, size_t size, uint64_t n, uint64_t *lens,
                           size_t *bytes_at, const char *what)
{
	const unsigned char *b = p, *at = b, *end = b + size;
	uint64_t total = 0;
	*bytes_at = 0;
	if (n > size)
		return dvar_error_set(DVAR_ECORRUPT, "%s: %zu bytes cannot hold %llu string lengths", what,
		                      size, (unsigned long long)n);
	for (uint64_t i = 0; i < n; i++) {
		int e = get_varint(&at, end, &lens[i]);
		if (e)
			return dvar_error_set(DVAR_ECORRUPT, "%s: the length of string %llu is %s", what,
			                      (unsigned long long)i, e == -1 ? "truncated" : "malformed");
		if (lens[i] > size)
			return dvar_error_set(DVAR_ECORRUPT, "%s: string %llu claims %llu bytes of a %zu-byte "
			                      "entry", what, (unsigned long long)i, (unsigned long long)lens[i], size);
		total += lens[i];   /* each <= size, n <= size: no overflow */
	}
	if (end - at < 4)
		return dvar_error_set(DVAR_ECORRUPT, "%s: the string entry is truncated before its length "
		                      "checksum", what);
	uint32_t stored = (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 |
	                  (uint32_t)at[3] << 24;
	uint32_t actual = lengths_crc(n, lens);
	if (dvar_tf_crc_unmask(stored) != actual)
		return dvar_error_set(DVAR_ECORRUPT, "%s: The length checksum does not match: expected %08u "
		                      "but actual is %08u", what, dvar_tf_crc_unmask(stored), actual);
	at += 4;
	if ((uint64_t)(end - at) != total)
		return dvar_error_set(DVAR_ECORRUPT, "%s: the string lengths add up to %llu bytes, the entry "
		                      "holds %zu after them", what, (unsigned long long)total,
		                      (size_t)(end - at));
	*bytes_at = (size_t)(at - b);
	return DVAR_OK;
}

uint32_t dvar_tf_strings_crc(const void *p, size_t size, uint64_t n, const uint64_t *lens,
                             size_t bytes_at)
{
	const unsigned char *b = p;
	uint32_t crc = lengths_crc(n, lens);
	crc = dvar_crc32c_extend(crc, b + bytes_at - 4, 4);
	return dvar_crc32c_extend(crc, b + bytes_at, size - bytes_at);
}

int dvar_tf_strings_encode(dvar_bytes *out, uint64_t n, const uint64_t *lens, const void *bytes,
                           uint32_t *crc)
{
	uint64_t total = 0;
	int rc = DVAR_OK;
	for (uint64_t i = 0; !rc && i < n; i++) {
		rc = dvar_bytes_put_varint(out, lens[i]);
		total += lens[i];
	}
	uint32_t lc = lengths_crc(n, lens);
	if (!rc) rc = dvar_bytes_put_u32(out, dvar_tf_crc_mask(lc));
	if (!rc && total > SIZE_MAX)
		rc = dvar_error_set(DVAR_ENOMEM, "string tensor of %llu bytes", (unsigned long long)total);
	if (!rc) rc = dvar_bytes_put(out, bytes, (size_t)total);
	if (!rc && crc) {
		unsigned char m[4];
		uint32_t mm = dvar_tf_crc_mask(lc);
		for (int k = 0; k < 4; k++)
			m[k] = (unsigned char)(mm >> (8 * k));
		*crc = dvar_crc32c_extend(dvar_crc32c_extend(lc, m, 4), bytes, (size_t)total);
	}
	return rc;
}

/* ---------------------------------------------------------------- locating */

char *dvar_tf_data_path(const char *prefix, uint32_t shard, uint32_t num_shards)
{
	size_t n = strlen(prefix) + 40;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s.data-%05u-of-%05u", prefix, shard, num_shards);
	return p;
}

static int is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *dvar_tf_concat(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 1);
	if (p) {
		memcpy(p, a, la);
		memcpy(p + la, b, lb + 1);
	}
	return p;
}

void *dvar_tf_grow(void *arr, size_t len, size_t *cap, size_t elem, size_t first)
{
	if (len < *cap)
		return arr;
	size_t ncap = *cap ? *cap * 2 : first;
	if (ncap < *cap || ncap > SIZE_MAX / elem)
		return NULL;
	void *p = realloc(arr, ncap * elem);
	if (p)
		*cap = ncap;
	return p;
}

/* prefix + ".index" is a regular file: 1 / 0 / DVAR_ENOMEM. */
static int has_index(const char *prefix)
{
	char *ix = dvar_tf_concat(prefix, ".index");
	if (!ix)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	int yes = is_file(ix);
	free(ix);
	return yes;
}

int dvar_tf_locate(const char *path, char **prefix)
{
	int rc;
	*prefix = NULL;
	if (!path || !*path)
		return 0;
	if ((rc = has_index(path)) != 0) {
		if (rc < 0)
			return rc;
		if (!(*prefix = strdup(path)))
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		return 1;
	}
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return 0;
	char *dindex = dvar_path_join(path, DVAR_INDEX_NAME);
	char *state = dvar_path_join(path, DVAR_POINTER_NAME);
	char *latest = NULL, *cand = NULL, *alt = NULL;
	dvar_checkpoint_state cs;
	rc = 0;
	if (!dindex || !state) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	/* A dvar checkpoint directory, or no state file: not ours to read. */
	if (dvar_fs_exists(dindex) || !is_file(state))
		goto done;
	if (dvar_checkpoint_state_read(path, &cs)) {
		dvar_error_clear();
		goto done;   /* the dvar reader reports what is wrong with it */
	}
	latest = cs.latest;
	cs.latest = NULL;
	dvar_checkpoint_state_clear(&cs);
	cand = latest[0] == '/' ? strdup(latest) : dvar_path_join(path, latest);
	if (!cand) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	if ((rc = has_index(cand)) != 0) {
		if (rc > 0) {
			*prefix = cand;
			cand = NULL;
		}
		goto done;
	}
	if (dvar_fs_is_dir(cand))
		goto done;   /* a dvar root: its latest is a checkpoint directory */
	/* A state file written with absolute paths, moved since: try its basename here. */
	const char *base = strrchr(latest, '/');
	if (latest[0] == '/' && base && base[1]) {
		if (!(alt = dvar_path_join(path, base + 1))) {
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
			goto done;
		}
		if ((rc = has_index(alt)) != 0) {
			if (rc > 0) {
				*prefix = alt;
				alt = NULL;
			}
			goto done;
		}
	}
	rc = dvar_error_set(DVAR_ENOTFOUND, "'%s': its latest checkpoint '%s' does not exist: the "
	                    "checkpoint state file names it, but there is neither a TensorFlow checkpoint "
	                    "('%s.index') nor a dvar checkpoint directory", path, latest, cand);
done:
	free(dindex);
	free(state);
	free(latest);
	free(cand);
	free(alt);
	return rc;
}

/* ---------------------------------------------------------------- opening a bundle */

typedef struct {
	unsigned char *key;   /* the slice key as stored */
	size_t klen;
	dvar_tf_entry e;
	int used;
} tf_pending;

typedef struct {
	char *name;
	dvar_tf_entry e;
} tf_plain;

typedef struct {
	const char *index_path;
	int have_header;
	dvar_tf_header h;
	tf_pending *slices;
	size_t num_slices, cap_slices;
	tf_plain *vars;
	size_t num_vars, cap_vars;
} tf_scan;

static int scan_visit(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
	tf_scan *st = ud;
	const unsigned char *k = key;
	char shown[160];
	int rc;
	if (!st->have_header) {
		if (klen != 0)
			return dvar_error_set(DVAR_ECORRUPT, "Unable to read file (%s). Perhaps the file is corrupt "
			                      "or was produced by a newer version of TensorFlow with format "
			                      "changes (failed to seek to header entry)", st->index_path);
		if ((rc = dvar_tf_header_decode(&st->h, val, vlen)))
			return dvar_error_set(rc, "Unable to read file (%s). Perhaps the file is corrupt or was "
			                      "produced by a newer version of TensorFlow with format changes "
			                      "(unable to parse header): %s", st->index_path,
			                      dvar_error_last()->message);
		st->have_header = 1;
		return DVAR_OK;
	}
	printable(k, klen, shown, sizeof(shown));
	if (klen && k[0] == 0) {
		char *full;
		size_t flen;
		dvar_tf_slice sl;
		if ((rc = dvar_tf_slice_key_decode(key, klen, &full, &flen, &sl)) < 0)
			return rc;
		free(full);
		tf_pending *p = dvar_tf_grow(st->slices, st->num_slices, &st->cap_slices, sizeof(*p), 16);
		if (!p)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		st->slices = p;
		tf_pending *ps = &st->slices[st->num_slices];
		memset(ps, 0, sizeof(*ps));
		if (!(ps->key = malloc(klen)))
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		memcpy(ps->key, key, klen);
		ps->klen = klen;
		if ((rc = dvar_tf_entry_decode(&ps->e, val, vlen, shown))) {
			free(ps->key);
			return rc;
		}
		st->num_slices++;
		if (ps->e.num_slices)
			return dvar_error_set(DVAR_ECORRUPT, "index entry '%s': a slice's data entry lists "
			                      "slices itself", shown);
		return DVAR_OK;
	}
	if (memchr(key, 0, klen))
		return dvar_error_set(DVAR_ENOTSUPP, "index key '%s' holds a NUL byte; dvar's variable "
		                      "names cannot", shown);
	if (klen > DVAR_MAX_NAME)
		return dvar_error_set(DVAR_ENOTSUPP, "index key '%s' is %zu bytes long; dvar's variable "
		                      "names are at most %d", shown, klen, DVAR_MAX_NAME);
	tf_plain *p = dvar_tf_grow(st->vars, st->num_vars, &st->cap_vars, sizeof(*p), 16);
	if (!p)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	st->vars = p;
	tf_plain *pv = &st->vars[st->num_vars];
	memset(pv, 0, sizeof(*pv));
	if (!(pv->name = strndup(key, klen)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if ((rc = dvar_tf_entry_decode(&pv->e, val, vlen, pv->name))) {
		free(pv->name);
		return rc;
	}
	st->num_vars++;
	return DVAR_OK;
}

static int pending_cmp(const void *a, const void *b)
{
	const tf_pending *x = a, *y = b;
	size_t n = x->klen < y->klen ? x->klen : y->klen;
	int c = memcmp(x->key, y->key, n);
	return c ? c : (x->klen > y->klen) - (x->klen < y->klen);
}

/* Check a data entry (dtype, size, shard) that is to be read as slice `sl`. */
static int check_data(const dvar_tf_entry *e, int dtype, const dvar_shape *shape, int32_t num_shards,
                      const char *what)
{
	uint64_t n;
	if (dvar_shape_num_elements(shape, &n))
		return dvar_error_set(DVAR_ECORRUPT, "index entry '%s': %s", what, dvar_error_last()->message);
	if (e->shard_id >= num_shards)
		return dvar_error_set(DVAR_ECORRUPT, "index entry '%s' lies in shard %d of a bundle of %d",
		                      what, e->shard_id, num_shards);
	size_t es = dvar_tf_dtype_size(dtype);
	if (es) {
		if (n > (uint64_t)INT64_MAX / es || (uint64_t)e->size != n * es)
			return dvar_error_set(DVAR_ECORRUPT, "Invalid size in bundle entry: key %s; stored size "
			                      "%lld; expected size %llu", what, (long long)e->size,
			                      n > (uint64_t)INT64_MAX / es ? 0ULL : (unsigned long long)(n * es));
	} else if (dtype == DVAR_TF_DT_STRING && ((uint64_t)e->size < n || (uint64_t)e->size - n < 4)) {
		return dvar_error_set(DVAR_ECORRUPT, "Invalid size in bundle entry: key %s; stored size %lld; "
		                      "a string tensor of %llu elements takes at least %llu bytes", what,
		                      (long long)e->size, (unsigned long long)n, (unsigned long long)n + 4);
	}
	return DVAR_OK;
}

static int fill_slice(dvar_slice_entry *s, const dvar_slice *sl, const dvar_tf_entry *e)
{
	memset(s, 0, sizeof(*s));
	s->slice = *sl;
	s->file = (uint32_t)e->shard_id;
	s->raw_bytes = (uint64_t)e->size;
	s->chunk_size = e->size ? (uint64_t)e->size : 1;
	if (!e->size)
		return DVAR_OK;   /* nothing stored, nothing to read */
	if (!(s->chunks = calloc(1, sizeof(dvar_chunk))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	s->num_chunks = 1;
	s->chunks[0].offset = (uint64_t)e->offset;
	s->chunks[0].stored = (uint64_t)e->size;
	s->chunks[0].crc = dvar_tf_crc_unmask(e->crc32c);
	s->chunks[0].codec = DVAR_CODEC_WHOLE;
	return DVAR_OK;
}

static int build_var(tf_scan *st, tf_plain *pv, dvar_var_entry *v)
{
	const dvar_tf_entry *e = &pv->e;
	int rc;
	memset(v, 0, sizeof(*v));
	v->name = pv->name;
	pv->name = NULL;
	v->dtype = e->dtype;
	v->shape = e->shape;
	uint64_t n;
	if (dvar_shape_num_elements(&v->shape, &n))
		return dvar_error_set(DVAR_ECORRUPT, "index entry '%s': %s", v->name, dvar_error_last()->message);
	if (!e->num_slices) {
		dvar_slice full;
		dvar_slice_full(&full, &v->shape);
		if ((rc = check_data(e, v->dtype, &v->shape, st->h.num_shards, v->name)))
			return rc;
		if (!(v->slices = calloc(1, sizeof(dvar_slice_entry))))
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		v->num_slices = 1;
		if ((rc = fill_slice(&v->slices[0], &full, e)))
			return rc;
		v->raw_bytes = v->stored_bytes = (uint64_t)e->size;
		return DVAR_OK;
	}
	/* A partitioned tensor: every listed slice has its data entry under its slice key. */
	if (!(v->slices = calloc(e->num_slices, sizeof(dvar_slice_entry))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	dvar_bytes key = { 0 };
	rc = DVAR_OK;
	for (size_t j = 0; j < e->num_slices && !rc; j++) {
		char what[DVAR_MAX_NAME + 300], sl[256];
		dvar_slice s;
		snprintf(what, sizeof(what), "index entry '%s' slice #%zu", v->name, j);
		if ((rc = dvar_tf_slice_resolve(&e->slices[j], &v->shape, &s, what)))
			break;
		dvar_slice_format(&s, &v->shape, sl, sizeof(sl));
		snprintf(what, sizeof(what), "%s (slice %s)", v->name, *sl ? sl : "-");
		key.len = 0;
		if ((rc = dvar_tf_slice_key_encode(&key, v->name, strlen(v->name), &e->slices[j])))
			break;
		tf_pending probe = { key.data, key.len, { 0 }, 0 };
		tf_pending *ps = st->num_slices ? bsearch(&probe, st->slices, st->num_slices,
		                                          sizeof(tf_pending), pending_cmp) : NULL;
		if (!ps) {
			rc = dvar_error_set(DVAR_ECORRUPT, "index entry '%s' lists slice %s, whose data entry is "
			                    "missing", v->name, *sl ? sl : "-");
			break;
		}
		if (ps->used) {
			rc = dvar_error_set(DVAR_ECORRUPT, "index entry '%s' lists slice %s twice", v->name,
			                    *sl ? sl : "-");
			break;
		}
		ps->used = 1;
		dvar_shape want;
		dvar_slice_shape(&s, &want);
		if (ps->e.dtype != v->dtype || !dvar_shape_equal(&ps->e.shape, &want)) {
			char a[128], b[128];
			dvar_shape_format(&ps->e.shape, a, sizeof(a));
			dvar_shape_format(&want, b, sizeof(b));
			rc = dvar_error_set(DVAR_ECORRUPT, "index entry '%s': its data entry has dtype %d shape %s, "
			                    "the slice needs dtype %d shape %s", what, ps->e.dtype, a,
			                    v->dtype, b);
			break;
		}
		if ((rc = check_data(&ps->e, v->dtype, &want, st->h.num_shards, what)))
			break;
		for (size_t k = 0; k < j && !rc; k++) {
			dvar_slice x;
			uint64_t m;
			if (dvar_slice_intersect(&v->slices[k].slice, &s, &x) == 1 &&
			    dvar_slice_num_elements(&x, &m) == DVAR_OK && m)
				rc = dvar_error_set(DVAR_ECORRUPT, "index entry '%s': slices #%zu and #%zu overlap",
				                    v->name, k, j);
		}
		if (!rc && !(rc = fill_slice(&v->slices[j], &s, &ps->e))) {
			v->num_slices = j + 1;
			v->raw_bytes += (uint64_t)ps->e.size;
		}
	}
	free(key.data);
	v->stored_bytes = v->raw_bytes;
	return rc;
}

int dvar_tf_open_index(const char *prefix, dvar_header *header, dvar_var_entry **vars,
                       size_t *num_vars)
{
	tf_scan st;
	int rc;
	memset(&st, 0, sizeof(st));
	memset(header, 0, sizeof(*header));
	*vars = NULL;
	*num_vars = 0;
	char *index = dvar_tf_concat(prefix, ".index");
	if (!index)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	st.index_path = index;
	dvar_var_entry *out = NULL;
	size_t nout = 0;
	if ((rc = dvar_index_scan(index, scan_visit, &st)))
		goto done;
	if (!st.have_header) {
		rc = dvar_error_set(DVAR_ECORRUPT, "Unable to read file (%s). Perhaps the file is corrupt or "
		                    "was produced by a newer version of TensorFlow with format changes "
		                    "(failed to seek to header entry)", index);
		goto done;
	}
	if ((rc = dvar_tf_header_check(&st.h, index)))
		goto done;
	/* The table is sorted bytewise: slice keys already are; keep the check cheap and sure. */
	for (size_t i = 1; i < st.num_slices; i++)
		if (pending_cmp(&st.slices[i - 1], &st.slices[i]) >= 0) {
			rc = dvar_error_set(DVAR_ECORRUPT, "index '%s': keys out of order", index);
			goto done;
		}
	if (st.num_vars && !(out = calloc(st.num_vars, sizeof(dvar_var_entry)))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < st.num_vars && !rc; i++) {
		rc = build_var(&st, &st.vars[i], &out[i]);
		nout = i + 1;
	}
	if (rc)
		goto done;
	header->num_files = (uint32_t)st.h.num_shards;
	if (!(header->file_sizes = calloc(header->num_files, sizeof(uint64_t)))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	header->num_vars = st.num_vars;
	*vars = out;
	*num_vars = nout;
	out = NULL;
done:
	for (size_t i = 0; out && i < nout; i++)
		dvar_var_entry_clear(&out[i]);
	free(out);
	for (size_t i = 0; i < st.num_slices; i++) {
		free(st.slices[i].key);
		dvar_tf_entry_clear(&st.slices[i].e);
	}
	free(st.slices);
	for (size_t i = 0; i < st.num_vars; i++) {
		free(st.vars[i].name);
		dvar_tf_entry_clear(&st.vars[i].e);
	}
	free(st.vars);
	dvar_tf_header_clear(&st.h);
	free(index);
	return rc;
}
