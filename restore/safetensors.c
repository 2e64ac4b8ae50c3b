/*
 * restore/safetensors.c - the safetensors format: its dtype names, and the
 * reader of a file's header that import uses. The format
 * (huggingface/safetensors): an 8-byte little-endian header length N, N
 * bytes of JSON (an object: per tensor {"dtype", "shape", "data_offsets":
 * [begin, end)} relative to the byte buffer after the header, plus an
 * optional "__metadata__" object of strings), then the byte buffer. The
 * JSON is parsed by a small strict parser of exactly that schema.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "restore/restore.h"

static const struct {
	const char *name;
	int dtype;
} st_types[] = {
	{ "F32", DVAR_FLOAT32 }, { "F64", DVAR_FLOAT64 }, { "F16", DVAR_FLOAT16 },
	{ "BF16", DVAR_BFLOAT16 }, { "I8", DVAR_INT8 },  { "I16", DVAR_INT16 },
	{ "I32", DVAR_INT32 },   { "I64", DVAR_INT64 },   { "U8", DVAR_UINT8 },
	{ "U16", DVAR_UINT16 },  { "U32", DVAR_UINT32 },  { "U64", DVAR_UINT64 },
	{ "BOOL", DVAR_BOOL },
};

#define NUM_ST_TYPES (sizeof(st_types) / sizeof(st_types[0]))

const char *dvar_st_dtype_name(int dtype)
{
	for (size_t i = 0; i < NUM_ST_TYPES; i++)
		if (st_types[i].dtype == dtype)
			return st_types[i].name;
	return NULL;
}

/* ------------------------------------------------------------- reading */

/* The most header bytes the format allows (safetensors' MAX_HEADER_SIZE). */
#define ST_HEADER_MAX 100000000u

/* A cursor over the JSON header. */
typedef struct {
	const char *start, *p, *end;
	const char *path;
	dvar_st_tensor *t; /* the tensors so far */
	size_t n, cap;
} json;

static int bad(const json *j, const char *fmt, ...) DVAR_PRINTF(2, 3);

static int bad(const json *j, const char *fmt, ...)
{
	char msg[DVAR_ERROR_MESSAGE_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return dvar_error_set(DVAR_ECORRUPT, "'%s': bad safetensors header at byte %zu: %s",
	                      j->path, (size_t)(j->p - j->start) + 8, msg);
}

static void ws(json *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int next_is(json *j, char c)
{
	ws(j);
	if (j->p < j->end && *j->p == c) {
		j->p++;
		return 1;
	}
	return 0;
}

static int want(json *j, char c)
{
	return next_is(j, c) ? DVAR_OK : bad(j, "expected '%c'", c);
}

static int hex4(json *j, unsigned *out)
{
	*out = 0;
	for (int k = 0; k < 4; k++, j->p++) {
		char c = j->p < j->end ? *j->p : '\0';
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
		      : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (v < 0)
			return bad(j, "a \\u escape needs four hex digits");
		*out = *out << 4 | (unsigned)v;
	}
	return DVAR_OK;
}

/* A string, unescaped into *out (malloc'ed, NUL-terminated; NULL: skipped). */
static int string(json *j, char **out)
{
	char *buf = NULL;
	size_t n = 0;
	int rc = DVAR_OK;

	if ((rc = want(j, '"')) != DVAR_OK)
		return rc;
	/* Unescaped it is never longer than it is in the header. */
	size_t raw = 0, left = (size_t)(j->end - j->p);
	while (raw < left && j->p[raw] != '"')
		raw += j->p[raw] == '\\' ? 2 : 1;
	if (out && !(buf = malloc(raw + 1)))
		return dvar_error_set(DVAR_ENOMEM, "'%s': out of memory", j->path);
	for (;;) {
		if (j->p >= j->end) {
			rc = bad(j, "unterminated string");
			break;
		}
		unsigned char c = (unsigned char)*j->p++;
		if (c == '"')
			break;
		if (c < 0x20) {
			rc = bad(j, "a control character in a string");
			break;
		}
		if (c != '\\') {
			if (buf)
				buf[n++] = (char)c;
			continue;
		}
		char e = j->p < j->end ? *j->p++ : '\0';
		const char *simple = strchr("\"\\/bfnrt", e);
		unsigned u, lo;
		if (e && simple) {
			if (buf)
				buf[n++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
			continue;
		}
		if (e != 'u') {
			rc = bad(j, "bad escape '\\%c'", e ? e : '0');
			break;
		}
		if ((rc = hex4(j, &u)) != DVAR_OK)
			break;
		if (u >= 0xD800 && u < 0xDC00) { /* a surrogate pair */
			if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u') {
				rc = bad(j, "a lone surrogate in a \\u escape");
				break;
			}
			j->p += 2;
			if ((rc = hex4(j, &lo)) != DVAR_OK)
				break;
			if (lo < 0xDC00 || lo > 0xDFFF) {
				rc = bad(j, "a lone surrogate in a \\u escape");
				break;
			}
			u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
		} else if (u >= 0xDC00 && u <= 0xDFFF) {
			rc = bad(j, "a lone surrogate in a \\u escape");
			break;
		} else if (u == 0) {
			rc = bad(j, "a NUL character in a string");
			break;
		}
		if (!buf)
			continue;
		/* UTF-8: six escaped bytes never make more than four. */
		if (u < 0x80) {
			buf[n++] = (char)u;
		} else if (u < 0x800) {
			buf[n++] = (char)(0xC0 | u >> 6);
			buf[n++] = (char)(0x80 | (u & 0x3F));
		} else if (u < 0x10000) {
			buf[n++] = (char)(0xE0 | u >> 12);
			buf[n++] = (char)(0x80 | (u >> 6 & 0x3F));
			buf[n++] = (char)(0x80 | (u & 0x3F));
		} else {
			buf[n++] = (char)(0xF0 | u >> 18);
			buf[n++] = (char)(0x80 | (u >> 12 & 0x3F));
			buf[n++] = (char)(0x80 | (u >> 6 & 0x3F));
			buf[n++] = (char)(0x80 | (u & 0x3F));
		}
	}
	if (rc != DVAR_OK) {
		free(buf);
		return rc;
	}
	if (buf) {
		buf[n] = '\0';
		*out = buf;
	}
	return DVAR_OK;
}

/* A non-negative integer as JSON writes it: no sign, fraction or leading zero. */
static int integer(json *j, uint64_t *out)
{
	ws(j);
	const char *s = j->p;
	*out = 0;
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
		if (*out > (INT64_MAX - 9) / 10)
			return bad(j, "a number above 2^63");
		*out = *out * 10 + (uint64_t)(*j->p++ - '0');
	}
	if (j->p == s)
		return bad(j, "expected a whole number >= 0");
	if (j->p - s > 1 && *s == '0')
		return bad(j, "a number with a leading zero");
	if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
		return bad(j, "expected a whole number");
	return DVAR_OK;
}

/* [n, ...] of at most max integers into v; *n gets their count (which may exceed max). */
static int integers(json *j, uint64_t *v, int max, int *n)
{
	int rc;

	*n = 0;
	if ((rc = want(j, '[')) != DVAR_OK || next_is(j, ']'))
		return rc;
	do {
		uint64_t x;
		if ((rc = integer(j, &x)) != DVAR_OK)
			return rc;
		if (*n < max)
			v[*n] = x;
		(*n)++;
	} while (next_is(j, ','));
	return want(j, ']');
}

/* "__metadata__": an object of strings, which import has no use for. */
static int metadata(json *j)
{
	int rc;

	if ((rc = want(j, '{')) != DVAR_OK || next_is(j, '}'))
		return rc;
	do {
		if ((rc = string(j, NULL)) != DVAR_OK || (rc = want(j, ':')) != DVAR_OK ||
		    (rc = string(j, NULL)) != DVAR_OK)
			return rc;
	} while (next_is(j, ','));
	return want(j, '}');
}

static int st_dtype(const json *j, const char *tensor, const char *name, int *out)
{
	for (size_t i = 0; i < NUM_ST_TYPES; i++)
		if (strcmp(st_types[i].name, name) == 0) {
			*out = st_types[i].dtype;
			return DVAR_OK;
		}
	return dvar_error_set(DVAR_ENOTSUPP, "'%s': tensor '%s' has dtype %s, which dvar cannot "
	                                     "hold (it holds BOOL, U8-U64, I8-I64, F16, BF16, "
	                                     "F32, F64)", j->path, tensor, name);
}

/* One tensor's object: exactly "dtype", "shape" and "data_offsets". */
static int tensor(json *j, dvar_st_tensor *t)
{
	uint64_t dims[DVAR_MAX_RANK], off[2];
	int have_dtype = 0, rank = -1, noff = -1, rc;
	char *key = NULL, *dtype = NULL;

	if ((rc = want(j, '{')) != DVAR_OK)
		return rc;
	if (!next_is(j, '}')) {
		do {
			free(key);
			key = NULL;
			if ((rc = string(j, &key)) != DVAR_OK || (rc = want(j, ':')) != DVAR_OK)
				break;
			if (strcmp(key, "dtype") == 0 && !have_dtype) {
				rc = string(j, &dtype);
				have_dtype = 1;
			} else if (strcmp(key, "shape") == 0 && rank < 0) {
				rc = integers(j, dims, DVAR_MAX_RANK, &rank);
			} else if (strcmp(key, "data_offsets") == 0 && noff < 0) {
				rc = integers(j, off, 2, &noff);
			} else {
				rc = bad(j, "tensor '%s': %s key '%s'", t->name,
				         strcmp(key, "dtype") && strcmp(key, "shape") &&
				         strcmp(key, "data_offsets") ? "unknown" : "a second", key);
			}
		} while (rc == DVAR_OK && next_is(j, ','));
		if (rc == DVAR_OK)
			rc = want(j, '}');
	}
	free(key);
	if (rc == DVAR_OK && (!have_dtype || rank < 0 || noff < 0))
		rc = bad(j, "tensor '%s' lacks \"%s\"", t->name,
		         !have_dtype ? "dtype" : rank < 0 ? "shape" : "data_offsets");
	if (rc == DVAR_OK && noff != 2)
		rc = bad(j, "tensor '%s': \"data_offsets\" holds %d numbers, not 2", t->name, noff);
	if (rc == DVAR_OK && rank > DVAR_MAX_RANK)
		rc = dvar_error_set(DVAR_ENOTSUPP, "'%s': tensor '%s': rank %d is above dvar's "
		                                   "maximum of %d", j->path, t->name, rank,
		                    DVAR_MAX_RANK);
	if (rc == DVAR_OK)
		rc = st_dtype(j, t->name, dtype, &t->dtype);
	free(dtype);
	if (rc != DVAR_OK)
		return rc;
	t->shape.rank = rank;
	for (int d = 0; d < rank; d++)
		t->shape.dims[d] = (int64_t)dims[d];
	if (off[1] < off[0])
		return bad(j, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] run backwards",
		           t->name, off[0], off[1]);
	t->offset = off[0];
	t->bytes = off[1] - off[0];
	return DVAR_OK;
}

/* The header: an object of tensors, and "__metadata__". */
static int header(json *j)
{
	int rc;

	if ((rc = want(j, '{')) != DVAR_OK || next_is(j, '}'))
		return rc;
	do {
		char *name = NULL;
		ws(j);
		const char *at = j->p;
		if ((rc = string(j, &name)) != DVAR_OK)
			return rc;
		if ((rc = want(j, ':')) != DVAR_OK) {
			free(name);
			return rc;
		}
		if (!name[0]) {
			free(name);
			j->p = at;
			return bad(j, "a tensor with an empty name");
		}
		if (strcmp(name, "__metadata__") == 0) {
			free(name);
			rc = metadata(j);
		} else {
			dvar_st_tensor *t = dvar_grow(j->t, j->n, &j->cap, sizeof(*t), 16);
			if (!t) {
				free(name);
				return dvar_error_set(DVAR_ENOMEM, "'%s': out of memory", j->path);
			}
			j->t = t;
			t = &j->t[j->n++];
			memset(t, 0, sizeof(*t));
			t->name = name;
			rc = tensor(j, t);
		}
		if (rc != DVAR_OK)
			return rc;
	} while (next_is(j, ','));
	if ((rc = want(j, '}')) != DVAR_OK)
		return rc;
	/* The format pads the header with spaces. */
	ws(j);
	return j->p == j->end ? DVAR_OK : bad(j, "bytes after the header's object");
}

static int by_offset(const void *a, const void *b)
{
	const dvar_st_tensor *x = a, *y = b;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

/* The format's checks: every tensor's bytes inside the buffer, as many as
 * its shape and dtype take, none shared by two tensors. */
static int check_tensors(const json *j, uint64_t buffer)
{
	for (size_t i = 0; i < j->n; i++) {
		const dvar_st_tensor *t = &j->t[i];
		uint64_t need;
		char shape[64];
		if (t->offset > buffer || t->bytes > buffer - t->offset)
			return dvar_error_set(DVAR_ECORRUPT, "'%s': tensor '%s': data_offsets [%" PRIu64
			                                     ", %" PRIu64 "] lie outside the %" PRIu64
			                                     " bytes of data", j->path, t->name,
			                      t->offset, t->offset + t->bytes, buffer);
		if (dvar_shape_num_bytes(&t->shape, t->dtype, &need) != DVAR_OK)
			return dvar_error_prefix("'%s': tensor '%s': ", j->path, t->name);
		dvar_shape_format(&t->shape, shape, sizeof(shape));
		if (need != t->bytes)
			return dvar_error_set(DVAR_ECORRUPT, "'%s': tensor '%s': shape %s of %s takes %"
			                                     PRIu64 " bytes, its data_offsets hold %"
			                                     PRIu64, j->path, t->name, shape,
			                      dvar_st_dtype_name(t->dtype), need, t->bytes);
	}
	if (j->n) /* a header of no tensors has no array to sort */
		qsort(j->t, j->n, sizeof(*j->t), by_offset);
	for (size_t i = 1; i < j->n; i++)
		if (j->t[i].offset < j->t[i - 1].offset + j->t[i - 1].bytes)
			return dvar_error_set(DVAR_ECORRUPT, "'%s': tensors '%s' and '%s' share bytes "
			                                     "of the data", j->path, j->t[i - 1].name,
			                      j->t[i].name);
	return DVAR_OK;
}

int dvar_st_read_header(int fd, const char *path, uint64_t size, dvar_st_tensor **out,
                        size_t *n)
{
	unsigned char len8[8];
	json j = { .path = path };
	uint64_t hlen = 0;
	char *text = NULL;
	int rc;

	*out = NULL;
	*n = 0;
	if (size < 8)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': truncated safetensors file: %" PRIu64
		                                     " bytes, less than its 8-byte header length",
		                      path, size);
	if ((rc = dvar_fs_pread_all(fd, len8, 8, 0, path)) != DVAR_OK)
		return rc;
	for (int k = 7; k >= 0; k--)
		hlen = hlen << 8 | len8[k];
	if (hlen > ST_HEADER_MAX)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': the safetensors header claims %" PRIu64
		                                     " bytes, more than the format's %u", path, hlen,
		                      ST_HEADER_MAX);
	if (hlen > size - 8)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': truncated safetensors header: it claims %"
		                                     PRIu64 " bytes, the file has %" PRIu64
		                                     " after its length", path, hlen, size - 8);
	if (!(text = malloc(hlen ? (size_t)hlen : 1)))
		return dvar_error_set(DVAR_ENOMEM, "'%s': out of memory for its %" PRIu64
		                                   "-byte header", path, hlen);
	rc = dvar_fs_pread_all(fd, text, (size_t)hlen, 8, path);
	j.start = j.p = text;
	j.end = text + hlen;
	if (rc == DVAR_OK)
		rc = header(&j);
	if (rc == DVAR_OK)
		rc = check_tensors(&j, size - 8 - hlen);
	free(text);
	if (rc != DVAR_OK) {
		dvar_st_tensors_free(j.t, j.n);
		return rc;
	}
	for (size_t i = 0; i < j.n; i++)
		j.t[i].offset += 8 + hlen;
	*out = j.t;
	*n = j.n;
	return DVAR_OK;
}

void dvar_st_tensors_free(dvar_st_tensor *t, size_t n)
{
	for (size_t i = 0; t && i < n; i++)
		free(t[i].name);
	free(t);
}
