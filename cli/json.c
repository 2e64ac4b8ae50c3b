/*
 * cli/json.c - a small streaming writer for the one JSON document that
 * --json prints: it places the commas, escapes strings, and keeps the output
 * valid JSON whatever bytes a variable's name holds.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "cli.h"

/* Length of the valid UTF-8 sequence at s (avail bytes left), or 0 when it is not one. */
static int utf8_len(const unsigned char *s, size_t avail)
{
	int n;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if ((s[0] & 0xf0) == 0xe0) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if ((s[0] & 0xf8) == 0xf0) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if ((size_t)n > avail)
		return 0;
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	/* Reject overlong forms, surrogates and values past U+10FFFF. */
	static const uint32_t min[] = { 0, 0, 0x80, 0x800, 0x10000 };
	if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* len bytes at str as a JSON string; a byte that is not UTF-8 becomes U+FFFD. */
static void put_string_n(FILE *f, const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *)str, *end = s + len;

	fputc('"', f);
	while (s < end) {
		int n = utf8_len(s, (size_t)(end - s));
		if (n == 0) {
			/* Not UTF-8: JSON cannot carry the byte, so mark where it was. */
			fputs("\\ufffd", f);
			s++;
			continue;
		}
		switch (*s) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		case '\b': fputs("\\b", f); break;
		case '\f': fputs("\\f", f); break;
		default:
			if (*s < 0x20)
				fprintf(f, "\\u%04x", *s);
			else
				fwrite(s, 1, (size_t)n, f);
			break;
		}
		s += n;
	}
	fputc('"', f);
}

static void put_string(FILE *f, const char *str)
{
	put_string_n(f, str, strlen(str));
}

int cli_json_mode;

/* The document being written on stdout, and whether one was completed. */
static cli_json *open_doc;
static int doc_done;

/* The comma and key before a member; 0 when the document was closed by an error. */
static int member(cli_json *j, const char *key)
{
	if (j->failed)
		return 0;
	if (j->nonempty[j->depth])
		fputc(',', j->f);
	j->nonempty[j->depth] = 1;
	if (key) {
		put_string(j->f, key);
		fputc(':', j->f);
	}
	return 1;
}

static void open_container(cli_json *j, const char *key, char open, char close)
{
	if (!member(j, key))
		return;
	fputc(open, j->f);
	j->depth++;
	j->closer[j->depth] = close;
	j->nonempty[j->depth] = 0;
}

void cli_json_begin(cli_json *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->failed = 0;
	j->nonempty[0] = 0;
	if (f == stdout)
		open_doc = j;
	open_container(j, NULL, '{', '}');
	cli_json_i64(j, "schema_version", 1);
}

void cli_json_begin_bare(cli_json *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->failed = 0;
	j->nonempty[0] = 0;
	open_container(j, NULL, '{', '}');
}

static int utf8_valid_n(const unsigned char *s, size_t len)
{
	for (size_t at = 0; at < len;) {
		int n = utf8_len(s + at, len - at);
		if (n == 0)
			return 0;
		at += (size_t)n;
	}
	return 1;
}

int cli_utf8_valid(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	return utf8_valid_n(s, strlen(str));
}

void cli_json_object(cli_json *j, const char *key)
{
	open_container(j, key, '{', '}');
}

void cli_json_array(cli_json *j, const char *key)
{
	open_container(j, key, '[', ']');
}

void cli_json_end(cli_json *j)
{
	if (j->failed)
		return;
	fputc(j->closer[j->depth], j->f);
	if (--j->depth == 0) {
		fputc('\n', j->f);
		if (j == open_doc) {
			open_doc = NULL;
			doc_done = 1;
		}
	}
}

void cli_json_error(const char *code, const char *message)
{
	cli_json fresh, *j = open_doc;

	if (doc_done)
		return;
	if (!j) {
		j = &fresh;
		cli_json_begin(j, stdout);
	}
	while (j->depth > 1)
		cli_json_end(j);
	cli_json_bool(j, "ok", 0);
	cli_json_object(j, "error");
	cli_json_str(j, "code", code);
	cli_json_str(j, "message", message);
	cli_json_end(j);
	cli_json_end(j);
	j->failed = 1;
}

void cli_json_str(cli_json *j, const char *key, const char *value)
{
	if (!member(j, key))
		return;
	if (value)
		put_string(j->f, value);
	else
		fputs("null", j->f);
}

void cli_json_u64(cli_json *j, const char *key, uint64_t v)
{
	if (!member(j, key))
		return;
	fprintf(j->f, "%" PRIu64, v);
}

void cli_json_i64(cli_json *j, const char *key, int64_t v)
{
	if (!member(j, key))
		return;
	fprintf(j->f, "%" PRId64, v);
}

void cli_json_real(cli_json *j, const char *key, double v)
{
	char buf[40];

	if (!member(j, key))
		return;
	if (!isfinite(v)) {
		fputs("null", j->f);
		return;
	}
	cli_format_real(buf, sizeof(buf), v, 0);
	fputs(buf, j->f);
}

void cli_json_bool(cli_json *j, const char *key, int v)
{
	if (!member(j, key))
		return;
	fputs(v ? "true" : "false", j->f);
}

void cli_json_dims(cli_json *j, const char *key, const int64_t *v, int n)
{
	cli_json_array(j, key);
	for (int i = 0; i < n; i++)
		cli_json_i64(j, NULL, v[i]);
	cli_json_end(j);
}

/* RFC 4648 base64, padded. */
static void put_base64(FILE *f, const unsigned char *p, size_t n)
{
	static const char abc[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

	fputc('"', f);
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < n)
			v |= p[i + 2];
		fputc(abc[(v >> 18) & 63], f);
		fputc(abc[(v >> 12) & 63], f);
		fputc(i + 1 < n ? abc[(v >> 6) & 63] : '=', f);
		fputc(i + 2 < n ? abc[v & 63] : '=', f);
	}
	fputc('"', f);
}

void cli_json_bytes(cli_json *j, const char *key, const void *p, uint64_t n)
{
	if (!member(j, key))
		return;
	if (utf8_valid_n(p, (size_t)n)) {
		put_string_n(j->f, p, (size_t)n);
		return;
	}
	fputs("{\"base64\":", j->f);
	put_base64(j->f, p, (size_t)n);
	fputc('}', j->f);
}

void cli_json_raw(cli_json *j, const char *key, const char *text)
{
	if (!member(j, key))
		return;
	fputs(text, j->f);
}
