/*
 * cli/json.c - a small streaming writer for the one JSON document that
 * --json prints: it places the commas, escapes strings, and keeps the output
 * valid JSON whatever bytes a variable's name holds.
 */
#include <inttypes.h>
#include <math.h>

#include "cli.h"

/* Length of the valid UTF-8 sequence at s, or 0 when it is not one. */
static int utf8_len(const unsigned char *s)
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

static void put_string(FILE *f, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	fputc('"', f);
	while (*s) {
		int n = utf8_len(s);
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

/* The comma and key before a member. */
static void member(cli_json *j, const char *key)
{
	if (j->nonempty[j->depth])
		fputc(',', j->f);
	j->nonempty[j->depth] = 1;
	if (key) {
		put_string(j->f, key);
		fputc(':', j->f);
	}
}

static void open_container(cli_json *j, const char *key, char open, char close)
{
	member(j, key);
	fputc(open, j->f);
	j->depth++;
	j->closer[j->depth] = close;
	j->nonempty[j->depth] = 0;
}

void cli_json_begin(cli_json *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->nonempty[0] = 0;
	open_container(j, NULL, '{', '}');
	cli_json_i64(j, "schema_version", 1);
}

void cli_json_begin_bare(cli_json *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->nonempty[0] = 0;
	open_container(j, NULL, '{', '}');
}

int cli_utf8_valid(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	while (*s) {
		int n = utf8_len(s);
		if (n == 0)
			return 0;
		s += n;
	}
	return 1;
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
	fputc(j->closer[j->depth], j->f);
	if (--j->depth == 0)
		fputc('\n', j->f);
}

void cli_json_str(cli_json *j, const char *key, const char *value)
{
	member(j, key);
	if (value)
		put_string(j->f, value);
	else
		fputs("null", j->f);
}

void cli_json_u64(cli_json *j, const char *key, uint64_t v)
{
	member(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void cli_json_i64(cli_json *j, const char *key, int64_t v)
{
	member(j, key);
	fprintf(j->f, "%" PRId64, v);
}

void cli_json_real(cli_json *j, const char *key, double v)
{
	char buf[40];

	member(j, key);
	if (!isfinite(v)) {
		fputs("null", j->f);
		return;
	}
	cli_format_real(buf, sizeof(buf), v, 0);
	fputs(buf, j->f);
}

void cli_json_bool(cli_json *j, const char *key, int v)
{
	member(j, key);
	fputs(v ? "true" : "false", j->f);
}

void cli_json_dims(cli_json *j, const char *key, const int64_t *v, int n)
{
	cli_json_array(j, key);
	for (int i = 0; i < n; i++)
		cli_json_i64(j, NULL, v[i]);
	cli_json_end(j);
}
