/*
 * restore/npy.c - NumPy's .npy format: the descr of each dvar dtype, the
 * version 1.0 header numpy writes (dvar_npy_header), and the parser of the
 * headers of versions 1.0, 2.0 and 3.0 (a Python dict literal with 'descr',
 * 'fortran_order' and 'shape') that import reads. Only what dvar can hold
 * is accepted: C order, little-endian (or byte-order-free) bool, integers
 * and floats; numpy has no bfloat16.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "restore/restore.h"

/* The dvar dtypes and the descr numpy writes for each: order, kind, item size. */
static const struct {
	const char *descr;
	int dtype;
} npy_types[] = {
	{ "|b1", DVAR_BOOL },    { "|i1", DVAR_INT8 },    { "<i2", DVAR_INT16 },
	{ "<i4", DVAR_INT32 },   { "<i8", DVAR_INT64 },   { "|u1", DVAR_UINT8 },
	{ "<u2", DVAR_UINT16 },  { "<u4", DVAR_UINT32 },  { "<u8", DVAR_UINT64 },
	{ "<f2", DVAR_FLOAT16 }, { "<f4", DVAR_FLOAT32 }, { "<f8", DVAR_FLOAT64 },
};

#define NUM_NPY_TYPES (sizeof(npy_types) / sizeof(npy_types[0]))

const char *dvar_npy_descr(int dtype)
{
	for (size_t i = 0; i < NUM_NPY_TYPES; i++)
		if (npy_types[i].dtype == dtype)
			return npy_types[i].descr;
	return NULL;
}

int dvar_npy_header(void *buf, size_t cap, size_t *len, int dtype, const dvar_shape *shape)
{
	const char *descr = dvar_npy_descr(dtype);
	char dict[DVAR_NPY_HEADER_MAX], dims[DVAR_MAX_RANK * 22] = "";
	size_t used = 0;

	if (dtype == DVAR_BFLOAT16)
		return dvar_error_set(DVAR_ENOTSUPP, "a .npy file cannot hold bfloat16 (numpy has "
		                                     "no such type)");
	if (!descr)
		return dvar_error_set(DVAR_EINVAL, "dtype %d is not a dvar dtype", dtype);
	if (!shape || shape->rank < 0 || shape->rank > DVAR_MAX_RANK)
		return dvar_error_set(DVAR_EINVAL, "dvar_npy_header: bad shape");
	/* Python's tuple repr: "()", "(3,)", "(3, 4)". */
	for (int d = 0; d < shape->rank; d++)
		used += (size_t)snprintf(dims + used, sizeof(dims) - used, "%s%" PRId64,
		                         d ? ", " : "", shape->dims[d]);
	int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (%s%s), }",
	                 descr, dims, shape->rank == 1 ? "," : "");
	/* Spaces and a newline pad it so that the data starts 64-byte aligned. */
	size_t pad = (64 - (10 + (size_t)n + 1) % 64) % 64;
	size_t hlen = (size_t)n + pad + 1;
	if (cap < 10 + hlen)
		return dvar_error_set(DVAR_EINVAL, "dvar_npy_header: %zu bytes of room, %zu needed",
		                      cap, 10 + hlen);
	unsigned char *p = buf;
	static const unsigned char magic[8] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0 };
	memcpy(p, magic, 8);
	p[8] = (unsigned char)(hlen & 0xff);
	p[9] = (unsigned char)(hlen >> 8);
	memcpy(p + 10, dict, (size_t)n);
	memset(p + 10 + n, ' ', pad);
	p[10 + hlen - 1] = '\n';
	*len = 10 + hlen;
	return DVAR_OK;
}

/* ------------------------------------------------------------- parsing */

static const unsigned char npy_magic[6] = { 0x93, 'N', 'U', 'M', 'P', 'Y' };

/* A cursor over the header text, which is not NUL-terminated. */
typedef struct {
	const char *p, *end;
	const char *what; /* the file (or member) in messages */
} lexer;

static int fail(const lexer *l, int code, const char *fmt, ...) DVAR_PRINTF(3, 4);

static int fail(const lexer *l, int code, const char *fmt, ...)
{
	char msg[DVAR_ERROR_MESSAGE_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return dvar_error_set(code, "%s: %s", l->what, msg);
}

static void skip_space(lexer *l)
{
	while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
		l->p++;
}

/* Consume c (after spaces) when it is next. */
static int accept(lexer *l, char c)
{
	skip_space(l);
	if (l->p < l->end && *l->p == c) {
		l->p++;
		return 1;
	}
	return 0;
}

static int expect(lexer *l, char c, const char *where)
{
	if (accept(l, c))
		return DVAR_OK;
	return fail(l, DVAR_ECORRUPT, "bad .npy header: expected '%c' %s", c, where);
}

/* A quoted Python string without escapes (all a header ever holds). */
static int parse_string(lexer *l, char *buf, size_t cap)
{
	skip_space(l);
	if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
		return fail(l, DVAR_ECORRUPT, "bad .npy header: expected a string");
	char quote = *l->p++;
	const char *s = l->p;
	while (l->p < l->end && *l->p != quote)
		l->p++;
	if (l->p >= l->end)
		return fail(l, DVAR_ECORRUPT, "bad .npy header: unterminated string");
	size_t n = (size_t)(l->p - s);
	l->p++;
	if (n >= cap)
		return fail(l, DVAR_ECORRUPT, "bad .npy header: string '%.*s' too long", (int)n, s);
	memcpy(buf, s, n);
	buf[n] = '\0';
	return DVAR_OK;
}

static int parse_bool(lexer *l, int *out)
{
	skip_space(l);
	size_t left = (size_t)(l->end - l->p);
	if (left >= 4 && memcmp(l->p, "True", 4) == 0) {
		l->p += 4;
		*out = 1;
	} else if (left >= 5 && memcmp(l->p, "False", 5) == 0) {
		l->p += 5;
		*out = 0;
	} else {
		return fail(l, DVAR_ECORRUPT, "bad .npy header: 'fortran_order' is not True or False");
	}
	return DVAR_OK;
}

/* A tuple of dimensions: "()", "(3,)", "(3, 4)". */
static int parse_shape(lexer *l, dvar_shape *out)
{
	int64_t dims[DVAR_MAX_RANK];
	int rank = 0, rc;

	if ((rc = expect(l, '(', "to open 'shape'")) != DVAR_OK)
		return rc;
	while (!accept(l, ')')) {
		int64_t v = 0;
		skip_space(l);
		if (l->p >= l->end || *l->p < '0' || *l->p > '9')
			return fail(l, DVAR_ECORRUPT, "bad .npy header: 'shape' holds a non-number");
		while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
			if (v > (INT64_MAX - 9) / 10)
				return fail(l, DVAR_ECORRUPT, "bad .npy header: a dimension is too large");
			v = v * 10 + (*l->p++ - '0');
		}
		if (l->p < l->end && *l->p == 'L') /* written by Python 2 */
			l->p++;
		if (rank < DVAR_MAX_RANK)
			dims[rank] = v;
		rank++;
		if (!accept(l, ',')) {
			if ((rc = expect(l, ')', "to close 'shape'")) != DVAR_OK)
				return rc;
			break;
		}
	}
	if (rank > DVAR_MAX_RANK)
		return fail(l, DVAR_ENOTSUPP, "rank %d is above dvar's maximum of %d", rank,
		            DVAR_MAX_RANK);
	if (dvar_shape_init(out, rank, dims) != DVAR_OK)
		return dvar_error_prefix("%s: ", l->what);
	return DVAR_OK;
}

static int descr_to_dtype(const lexer *l, const char *descr, int *out)
{
	char order = descr[0], kind = order ? descr[1] : '\0';
	unsigned size = 0;

	if (order == '\0' || kind == '\0' || strchr("<>|=", order) == NULL)
		return fail(l, DVAR_ENOTSUPP, "dtype '%s' is not supported", descr);
	for (const char *p = descr + 2; *p; p++) {
		if (*p < '0' || *p > '9' || size > 1000)
			return fail(l, DVAR_ENOTSUPP, "dtype '%s' is not supported", descr);
		size = size * 10 + (unsigned)(*p - '0');
	}
	if (kind == 'O')
		return fail(l, DVAR_ENOTSUPP, "object arrays ('%s') cannot be imported; convert to a "
		                              "numeric dtype", descr);
	if (kind == 'V' && size == 2)
		return fail(l, DVAR_ENOTSUPP, "dtype '%s' is raw 2-byte data; bfloat16 cannot come "
		                              "from .npy (numpy has no bfloat16): save it as float32",
		            descr);
	for (size_t i = 0; i < NUM_NPY_TYPES; i++) {
		const char *known = npy_types[i].descr;
		if (known[1] != kind || strtoul(known + 2, NULL, 10) != size)
			continue;
		/* '=' is the writer's native order, which the file does not record. */
		if (size > 1 && order != '<' && order != '|')
			return fail(l, DVAR_ENOTSUPP, "dtype '%s' is not little-endian; convert with "
			                              "arr.astype('<%c%u')", descr, kind, size);
		*out = npy_types[i].dtype;
		return DVAR_OK;
	}
	return fail(l, DVAR_ENOTSUPP, "dtype '%s' is not supported (dvar holds bool, int8-64, "
	                              "uint8-64, float16, float32, float64)", descr);
}

/* The header's dict: exactly the keys 'descr', 'fortran_order' and 'shape'. */
static int parse_dict(lexer *l, dvar_npy_info *out)
{
	char key[32], descr[64];
	int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0, rc;

	if ((rc = expect(l, '{', "at the start")) != DVAR_OK)
		return rc;
	while (!accept(l, '}')) {
		if ((rc = parse_string(l, key, sizeof(key))) != DVAR_OK ||
		    (rc = expect(l, ':', "after a key")) != DVAR_OK)
			return rc;
		if (strcmp(key, "descr") == 0) {
			skip_space(l);
			if (l->p < l->end && *l->p == '[')
				return fail(l, DVAR_ENOTSUPP, "structured dtypes are not supported");
			rc = parse_string(l, descr, sizeof(descr));
			have_descr = 1;
		} else if (strcmp(key, "fortran_order") == 0) {
			rc = parse_bool(l, &fortran);
			have_order = 1;
		} else if (strcmp(key, "shape") == 0) {
			rc = parse_shape(l, &out->shape);
			have_shape = 1;
		} else {
			return fail(l, DVAR_ECORRUPT, "bad .npy header: unknown key '%s'", key);
		}
		if (rc != DVAR_OK)
			return rc;
		if (!accept(l, ',')) {
			if ((rc = expect(l, '}', "to close the header")) != DVAR_OK)
				return rc;
			break;
		}
	}
	if (!have_descr || !have_order || !have_shape)
		return fail(l, DVAR_ECORRUPT, "bad .npy header: it lacks '%s'",
		            !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
	if ((rc = descr_to_dtype(l, descr, &out->dtype)) != DVAR_OK)
		return rc;
	/* With at most one dimension the two orders lay out the same bytes. */
	if (fortran && out->shape.rank > 1)
		return fail(l, DVAR_ENOTSUPP, "Fortran-order arrays are not supported; save "
		                              "np.ascontiguousarray(arr) instead");
	return DVAR_OK;
}

int dvar_npy_parse(const char *what, const void *buf, size_t len, uint64_t size,
                   dvar_npy_info *out)
{
	const unsigned char *b = buf;
	lexer l = { NULL, NULL, what };
	uint64_t hstart, hlen;
	int rc;

	memset(out, 0, sizeof(*out));
	if (size < sizeof(npy_magic) || memcmp(b, npy_magic, sizeof(npy_magic)) != 0)
		return fail(&l, DVAR_ECORRUPT, "not a .npy file (bad magic)");
	if (size < 10)
		return fail(&l, DVAR_ECORRUPT, "truncated .npy header");
	if (b[6] == 1) {
		hstart = 10;
		hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8;
	} else if (b[6] == 2 || b[6] == 3) {
		if (size < 12)
			return fail(&l, DVAR_ECORRUPT, "truncated .npy header");
		hstart = 12;
		hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 |
		       (uint64_t)b[11] << 24;
	} else {
		return fail(&l, DVAR_ENOTSUPP, "unsupported .npy format version %u.%u", b[6], b[7]);
	}
	if (hlen > size - hstart)
		return fail(&l, DVAR_ECORRUPT, "truncated .npy header: it claims %" PRIu64 " bytes, "
		                               "the file has %" PRIu64 " after the preamble", hlen,
		            size - hstart);
	if (hstart + hlen > len)
		return fail(&l, DVAR_ENOTSUPP, "the .npy header of %" PRIu64 " bytes is larger than "
		                               "dvar reads (%zu)", hlen, len - (size_t)hstart);
	l.p = (const char *)b + hstart;
	l.end = l.p + hlen;
	if ((rc = parse_dict(&l, out)) != DVAR_OK)
		return rc;
	if (dvar_shape_num_bytes(&out->shape, out->dtype, &out->bytes) != DVAR_OK)
		return dvar_error_prefix("%s: ", what);
	out->offset = hstart + hlen;
	uint64_t have = size - out->offset;
	if (out->bytes > have) {
		char shape[64];
		dvar_shape_format(&out->shape, shape, sizeof(shape));
		return fail(&l, DVAR_ECORRUPT, "data is truncated: shape %s of %s needs %" PRIu64
		                               " bytes, the file holds %" PRIu64, shape,
		            dvar_dtype_name(out->dtype), out->bytes, have);
	}
	out->trailing = have - out->bytes;
	return DVAR_OK;
}
