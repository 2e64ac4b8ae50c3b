/*
 * cli/npy.c - NumPy .npy files: map one read-only and parse its header
 * (format versions 1.0, 2.0 and 3.0; the header is a Python dict literal
 * with 'descr', 'fortran_order' and 'shape'), and write a v1.0 header.
 * Only what dvar can hold is accepted: C-order, little-endian (or
 * byte-order-free) bool, integers and floats. numpy has no bfloat16, so a
 * bfloat16 variable cannot come from a .npy file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const char npy_magic[6] = { '\x93', 'N', 'U', 'M', 'P', 'Y' };

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

const char *cli_npy_descr(int dtype)
{
	for (size_t i = 0; i < NUM_NPY_TYPES; i++)
		if (npy_types[i].dtype == dtype)
			return npy_types[i].descr;
	return NULL;
}

/* ------------------------------------------------------------- header */

/* A cursor over the header text, which is not NUL-terminated. */
typedef struct {
	const char *p, *end;
	char *err;
	size_t cap;
	const char *path;
} lexer;

static int fail(lexer *l, const char *fmt, ...) CLI_PRINTF(2, 3);

static int fail(lexer *l, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(l->err, l->cap, "'%s': ", l->path);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < l->cap)
		vsnprintf(l->err + n, l->cap - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
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
		return 0;
	return fail(l, "bad .npy header: expected '%c' %s", c, where);
}

/* A quoted Python string without escapes (all a header ever holds). */
static int parse_string(lexer *l, char *buf, size_t cap)
{
	skip_space(l);
	if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
		return fail(l, "bad .npy header: expected a string");
	char quote = *l->p++;
	const char *s = l->p;
	while (l->p < l->end && *l->p != quote)
		l->p++;
	if (l->p >= l->end)
		return fail(l, "bad .npy header: unterminated string");
	size_t n = (size_t)(l->p - s);
	l->p++;
	if (n >= cap)
		return fail(l, "bad .npy header: string '%.*s' too long", (int)n, s);
	memcpy(buf, s, n);
	buf[n] = '\0';
	return 0;
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
		return fail(l, "bad .npy header: 'fortran_order' is not True or False");
	}
	return 0;
}

/* A tuple of dimensions: "()", "(3,)", "(3, 4)". */
static int parse_shape(lexer *l, dvar_shape *out)
{
	int64_t dims[DVAR_MAX_RANK];
	int rank = 0;

	if (expect(l, '(', "to open 'shape'"))
		return -1;
	while (!accept(l, ')')) {
		int64_t v = 0;
		skip_space(l);
		if (l->p >= l->end || *l->p < '0' || *l->p > '9')
			return fail(l, "bad .npy header: 'shape' holds a non-number");
		while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
			if (v > (INT64_MAX - 9) / 10)
				return fail(l, "bad .npy header: a dimension is too large");
			v = v * 10 + (*l->p++ - '0');
		}
		if (l->p < l->end && *l->p == 'L') /* written by Python 2 */
			l->p++;
		if (rank < DVAR_MAX_RANK)
			dims[rank] = v;
		rank++;
		if (!accept(l, ',')) {
			if (expect(l, ')', "to close 'shape'"))
				return -1;
			break;
		}
	}
	if (rank > DVAR_MAX_RANK)
		return fail(l, "rank %d is above dvar's maximum of %d", rank, DVAR_MAX_RANK);
	if (dvar_shape_init(out, rank, dims) != DVAR_OK)
		return fail(l, "%s", cli_dvar_message());
	return 0;
}

static int descr_to_dtype(lexer *l, const char *descr, int *out)
{
	char order = descr[0], kind = descr[1];
	unsigned size = 0;

	if (order == '\0' || kind == '\0' || strchr("<>|=", order) == NULL)
		return fail(l, "dtype '%s' is not supported", descr);
	for (const char *p = descr + 2; *p; p++) {
		if (*p < '0' || *p > '9' || size > 1000)
			return fail(l, "dtype '%s' is not supported", descr);
		size = size * 10 + (unsigned)(*p - '0');
	}
	if (kind == 'O')
		return fail(l, "object arrays ('%s') cannot be imported; convert to a numeric dtype", descr);
	if (kind == 'V' && size == 2)
		return fail(l, "dtype '%s' is raw 2-byte data; bfloat16 cannot come from .npy "
		               "(numpy has no bfloat16): save it as float32", descr);
	for (size_t i = 0; i < NUM_NPY_TYPES; i++) {
		const char *known = npy_types[i].descr;
		if (known[1] != kind || strtoul(known + 2, NULL, 10) != size)
			continue;
		/* '=' is the writer's native order, which the file does not record. */
		if (size > 1 && order != '<' && order != '|')
			return fail(l, "dtype '%s' is not little-endian; convert with "
			               "arr.astype('<%c%u')", descr, kind, size);
		*out = npy_types[i].dtype;
		return 0;
	}
	return fail(l, "dtype '%s' is not supported (dvar holds bool, int8-64, uint8-64, "
	               "float16, float32, float64)", descr);
}

/* The header's dict: exactly the keys 'descr', 'fortran_order' and 'shape'. */
static int parse_header(lexer *l, cli_npy *out)
{
	char key[32], descr[64];
	int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0;

	if (expect(l, '{', "at the start"))
		return -1;
	while (!accept(l, '}')) {
		if (parse_string(l, key, sizeof(key)) || expect(l, ':', "after a key"))
			return -1;
		if (strcmp(key, "descr") == 0) {
			skip_space(l);
			if (l->p < l->end && *l->p == '[')
				return fail(l, "structured dtypes are not supported");
			if (parse_string(l, descr, sizeof(descr)))
				return -1;
			have_descr = 1;
		} else if (strcmp(key, "fortran_order") == 0) {
			if (parse_bool(l, &fortran))
				return -1;
			have_order = 1;
		} else if (strcmp(key, "shape") == 0) {
			if (parse_shape(l, &out->shape))
				return -1;
			have_shape = 1;
		} else {
			return fail(l, "bad .npy header: unknown key '%s'", key);
		}
		if (!accept(l, ',')) {
			if (expect(l, '}', "to close the header"))
				return -1;
			break;
		}
	}
	if (!have_descr || !have_order || !have_shape)
		return fail(l, "bad .npy header: it lacks '%s'",
		            !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
	if (descr_to_dtype(l, descr, &out->dtype))
		return -1;
	/* With at most one dimension the two orders lay out the same bytes. */
	if (fortran && out->shape.rank > 1)
		return fail(l, "Fortran-order arrays are not supported; save "
		               "np.ascontiguousarray(arr) instead");
	return 0;
}

/* ------------------------------------------------------------- the file */

/* Check the magic and version; the header's offset and length. */
static int parse_preamble(lexer *l, const unsigned char *b, size_t size, size_t *hstart,
                          size_t *hlen)
{
	if (size < sizeof(npy_magic) || memcmp(b, npy_magic, sizeof(npy_magic)) != 0)
		return fail(l, "not a .npy file (bad magic)");
	if (size < 10)
		return fail(l, "truncated .npy header");
	if (b[6] == 1) {
		*hstart = 10;
		*hlen = (size_t)b[8] | (size_t)b[9] << 8;
	} else if (b[6] == 2 || b[6] == 3) {
		if (size < 12)
			return fail(l, "truncated .npy header");
		*hstart = 12;
		*hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
	} else {
		return fail(l, "unsupported .npy format version %u.%u", b[6], b[7]);
	}
	if (*hlen > size - *hstart)
		return fail(l, "truncated .npy header: it claims %zu bytes, the file has %zu after "
		               "the preamble", *hlen, size - *hstart);
	return 0;
}

int cli_npy_open(cli_npy *out, const char *path, char *err, size_t cap)
{
	lexer l = { NULL, NULL, err, cap, path };
	struct stat st;
	size_t hstart = 0, hlen = 0;
	uint64_t need;

	memset(out, 0, sizeof(*out));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(&l, "%s", strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return fail(&l, "not a regular file");
	}
	if (st.st_size == 0) {
		close(fd);
		return fail(&l, "not a .npy file (empty)");
	}
	out->map_len = (size_t)st.st_size;
	out->map = mmap(NULL, out->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (out->map == MAP_FAILED) {
		out->map = NULL;
		return fail(&l, "mmap: %s", strerror(errno));
	}
	const unsigned char *b = out->map;
	if (parse_preamble(&l, b, out->map_len, &hstart, &hlen))
		goto fail;
	l.p = (const char *)b + hstart;
	l.end = l.p + hlen;
	if (parse_header(&l, out))
		goto fail;
	if (dvar_shape_num_bytes(&out->shape, out->dtype, &need) != DVAR_OK) {
		fail(&l, "%s", cli_dvar_message());
		goto fail;
	}
	size_t data_off = hstart + hlen, have = out->map_len - data_off;
	if (need > have) {
		char shape[64];
		dvar_shape_format(&out->shape, shape, sizeof(shape));
		fail(&l, "data is truncated: shape %s of %s needs %" PRIu64 " bytes, the file holds %zu",
		     shape, dvar_dtype_name(out->dtype), need, have);
		goto fail;
	}
	out->data = b + data_off;
	out->data_bytes = need;
	out->trailing = have - need;
	/* import reads the data once, front to back. */
	madvise(out->map, out->map_len, MADV_SEQUENTIAL);
	return 0;
fail:
	cli_npy_close(out);
	return -1;
}

void cli_npy_close(cli_npy *n)
{
	if (n->map)
		munmap(n->map, n->map_len);
	n->map = NULL;
}

int cli_npy_write_header(FILE *f, const char *descr, const dvar_shape *shape)
{
	char dict[256], dims[160] = "";
	size_t used = 0;

	/* Python's tuple repr: "()", "(3,)", "(3, 4)". */
	for (int d = 0; d < shape->rank; d++)
		used += (size_t)snprintf(dims + used, sizeof(dims) - used, "%s%" PRId64,
		                         d ? ", " : "", shape->dims[d]);
	int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (%s%s), }",
	                 descr, dims, shape->rank == 1 ? "," : "");
	/* Pad with spaces and a newline so the data starts 64-byte aligned. */
	size_t total = 10 + (size_t)n + 1;
	size_t pad = (64 - total % 64) % 64;
	size_t hlen = (size_t)n + pad + 1;
	unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
	                          (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8) };

	if (fwrite(pre, 1, sizeof(pre), f) != sizeof(pre) || fputs(dict, f) < 0 ||
	    fprintf(f, "%*s\n", (int)pad, "") < 0)
		return -1;
	return 0;
}
