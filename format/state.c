/*
 * format/state.c - TensorFlow's `checkpoint` state file, the one parser of
 * it: the reader (dvar_tf_locate), checkpoint roots (their pointer file) and
 * `dvar ls` (dvar_checkpoint_state_read) all read it here. It is a
 * CheckpointState in protobuf's text format,
 *
 *   message CheckpointState {
 *     string model_checkpoint_path = 1;
 *     repeated string all_model_checkpoint_paths = 2;
 *     repeated double all_model_checkpoint_timestamps = 3;
 *     double last_preserved_timestamp = 4;
 *   }
 *
 * parsed as tf.train.get_checkpoint_state parses it (text_format.Merge): a
 * repeated singular field keeps its last value, and what the text-format
 * tokenizer refuses, or a field the message does not have, is an error.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "format/format.h"

#define KEY_LATEST DVAR_STATE_LATEST
#define KEY_ALL DVAR_STATE_ALL
#define KEY_TIMES "all_model_checkpoint_timestamps"
#define KEY_PRESERVED "last_preserved_timestamp"

typedef struct {
	const char *p, *end;
	int line;
	const char *what;
} lexer;

static int fail(const lexer *lx, const char *fmt, ...) DVAR_PRINTF(2, 3);
static int fail(const lexer *lx, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return dvar_error_set(DVAR_ECORRUPT, "'%s' line %d: %s", lx->what, lx->line, msg);
}

/* Whitespace and `#` comments (to the end of the line). */
static void skip(lexer *lx)
{
	while (lx->p < lx->end) {
		char c = *lx->p;
		if (c == '#') {
			while (lx->p < lx->end && *lx->p != '\n')
				lx->p++;
		} else if (c == '\n') {
			lx->line++;
			lx->p++;
		} else if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
			lx->p++;
		} else {
			break;
		}
	}
}

/* 1 and the character consumed when the next token is c. */
static int accept(lexer *lx, char c)
{
	skip(lx);
	if (lx->p < lx->end && *lx->p == c) {
		lx->p++;
		return 1;
	}
	return 0;
}

static int is_ident(char c, int first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       (!first && c >= '0' && c <= '9');
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Code point cp as UTF-8 at o; the bytes written (0 for one UTF-8 cannot hold). */
static size_t put_utf8(char *o, unsigned long cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp >= 0xd800 && cp <= 0xdfff)
		return 0;
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	if (cp > 0x10ffff)
		return 0;
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/*
 * One escape after a backslash at lx->p, appended at o; the bytes written,
 * or -1 after reporting. protobuf's CUnescape: \a \b \f \n \r \t \v \\ \'
 * \" \?, octal \N..\NNN, hex \xN or \xNN, \uXXXX and \UXXXXXXXX.
 */
static int unescape(lexer *lx, const char *field, char *o)
{
	int c = lx->p < lx->end ? (unsigned char)*lx->p++ : 0;
	switch (c) {
	case 'a': *o = '\a'; return 1;
	case 'b': *o = '\b'; return 1;
	case 'f': *o = '\f'; return 1;
	case 'n': *o = '\n'; return 1;
	case 'r': *o = '\r'; return 1;
	case 't': *o = '\t'; return 1;
	case 'v': *o = '\v'; return 1;
	case '\\': case '\'': case '"': case '?': *o = (char)c; return 1;
	case 'x': {
		int v = 0, k = 0;
		for (; k < 2 && lx->p < lx->end && hexval(*lx->p) >= 0; k++)
			v = v * 16 + hexval(*lx->p++);
		if (!k)
			return fail(lx, "%s: \\x without hex digits", field), -1;
		*o = (char)v;
		return 1;
	}
	case 'u': case 'U': {
		int digits = c == 'u' ? 4 : 8;
		unsigned long cp = 0;
		for (int k = 0; k < digits; k++) {
			if (lx->p >= lx->end || hexval(*lx->p) < 0)
				return fail(lx, "%s: \\%c needs %d hex digits", field, c, digits), -1;
			cp = cp * 16 + (unsigned long)hexval(*lx->p++);
		}
		size_t n = put_utf8(o, cp);
		if (!n)
			return fail(lx, "%s: \\%c escape of %#lx, which is no character", field, c, cp), -1;
		return (int)n;
	}
	default:
		if (c >= '0' && c <= '7') {
			int v = c - '0';
			for (int k = 1; k < 3 && lx->p < lx->end && *lx->p >= '0' && *lx->p <= '7'; k++)
				v = v * 8 + (*lx->p++ - '0');
			*o = (char)(v & 0xff);
			return 1;
		}
		return fail(lx, "%s: invalid escape '\\%c'", field, c ? c : '0'), -1;
	}
}

/*
 * A string value: one or more adjacent quoted pieces (either quote, C
 * escapes), joined. *out malloc'ed; DVAR_ECORRUPT for anything else.
 */
static int string_value(lexer *lx, const char *field, char **out)
{
	skip(lx);
	if (lx->p >= lx->end || (*lx->p != '"' && *lx->p != '\''))
		return fail(lx, "%s is not a quoted path", field);
	/* Escapes never lengthen: \U00XXXXXX (10 bytes) is 4 bytes of UTF-8. */
	char *s = malloc((size_t)(lx->end - lx->p) + 1);
	size_t n = 0;
	if (!s)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	do {
		char q = *lx->p++;
		while (lx->p < lx->end && *lx->p != q && *lx->p != '\n') {
			if (*lx->p != '\\') {
				s[n++] = *lx->p++;
				continue;
			}
			lx->p++;
			int k = unescape(lx, field, s + n);
			if (k < 0) {
				free(s);
				return DVAR_ECORRUPT;
			}
			n += (size_t)k;
		}
		if (lx->p >= lx->end || *lx->p != q) {
			free(s);
			return fail(lx, "%s: the string does not end on its line", field);
		}
		lx->p++;
		skip(lx);
	} while (lx->p < lx->end && (*lx->p == '"' || *lx->p == '\''));
	if (memchr(s, '\0', n)) {
		free(s);
		return fail(lx, "%s holds a NUL byte", field);
	}
	s[n] = '\0';
	*out = s;
	return DVAR_OK;
}

/* A double value (parsed, not kept): [-] then a number ("1700000000.5",
 * "1e9", "12f") or inf, infinity, nan in any case. */
static int number_value(lexer *lx, const char *field)
{
	skip(lx);
	const char *start = lx->p;
	if (lx->p < lx->end && *lx->p == '-')
		lx->p++;
	const char *tok = lx->p;
	/* The tokenizer's number: letters, digits, '.', and a sign after an exponent's e. */
	while (lx->p < lx->end &&
	       (is_ident(*lx->p, 0) || *lx->p == '.' ||
	        ((*lx->p == '-' || *lx->p == '+') && lx->p > tok && (lx->p[-1] | 0x20) == 'e')))
		lx->p++;
	size_t len = (size_t)(lx->p - tok);
	char buf[64];
	if (len == 0 || len >= sizeof(buf))
		goto bad;
	memcpy(buf, tok, len);
	buf[len] = '\0';
	if (!strcasecmp(buf, "inf") || !strcasecmp(buf, "infinity") || !strcasecmp(buf, "nan"))
		return DVAR_OK;
	if ((*tok < '0' || *tok > '9') && *tok != '.')
		goto bad;
	if (len > 1 && (buf[len - 1] == 'f' || buf[len - 1] == 'F') &&
	    !(buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X')))
		buf[--len] = '\0';
	char *end;
	strtod(buf, &end);
	if (*end == '\0' && end != buf)
		return DVAR_OK;
bad:
	lx->p = start;
	return fail(lx, "%s is not a number", field);
}

static int push(char ***arr, size_t *n, char *s)
{
	char **grown = realloc(*arr, (*n + 1) * sizeof(char *));
	if (!grown) {
		free(s);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	*arr = grown;
	grown[(*n)++] = s;
	return DVAR_OK;
}

/* One value of field (a path when is_path, else a number) into out. */
static int one_value(lexer *lx, const char *field, int is_path, int repeated,
                     dvar_checkpoint_state *out)
{
	char *s = NULL;
	int rc;
	if (!is_path)
		return number_value(lx, field);
	if ((rc = string_value(lx, field, &s)))
		return rc;
	if (repeated)
		return push(&out->all, &out->num_all, s);
	free(out->latest);
	out->latest = s;
	return DVAR_OK;
}

void dvar_checkpoint_state_clear(dvar_checkpoint_state *s)
{
	if (!s)
		return;
	free(s->latest);
	for (size_t i = 0; i < s->num_all; i++)
		free(s->all[i]);
	free(s->all);
	memset(s, 0, sizeof(*s));
}

int dvar_checkpoint_state_parse(dvar_checkpoint_state *out, const char *text, size_t len,
                                const char *what)
{
	lexer lx = { text, text + len, 1, what };
	int rc = DVAR_OK;
	memset(out, 0, sizeof(*out));
	if (memchr(text, '\0', len))
		return dvar_error_set(DVAR_ECORRUPT, "'%s' is not a checkpoint state file: it holds "
		                      "a NUL byte", what);
	for (skip(&lx); !rc && lx.p < lx.end; skip(&lx)) {
		char field[64];
		size_t n = 0;
		while (lx.p + n < lx.end && is_ident(lx.p[n], n == 0))
			n++;
		if (n == 0) {
			unsigned char c = (unsigned char)*lx.p;
			rc = c > ' ' && c < 0x7f ? fail(&lx, "expected a field name, found '%c'", c)
			                         : fail(&lx, "expected a field name, found byte %#04x", c);
			break;
		}
		snprintf(field, sizeof(field), "%.*s", (int)n, lx.p);
		lx.p += n;
		int is_path = !strcmp(field, KEY_LATEST) || !strcmp(field, KEY_ALL);
		int repeated = !strcmp(field, KEY_ALL) || !strcmp(field, KEY_TIMES);
		if (!is_path && !repeated && strcmp(field, KEY_PRESERVED) != 0) {
			rc = fail(&lx, "unknown field '%s': a CheckpointState has " KEY_LATEST ", " KEY_ALL
			          ", " KEY_TIMES " and " KEY_PRESERVED, field);
			break;
		}
		/* Text format requires ':' before a scalar value. */
		if (!accept(&lx, ':')) {
			rc = fail(&lx, "expected ':' after %s", field);
			break;
		}
		if (!accept(&lx, '[')) {
			rc = one_value(&lx, field, is_path, repeated, out);
		} else if (!repeated) {
			rc = fail(&lx, "%s is not a repeated field: no [list]", field);
		} else if (!accept(&lx, ']')) {
			do
				rc = one_value(&lx, field, is_path, repeated, out);
			while (!rc && accept(&lx, ','));
			if (!rc && !accept(&lx, ']'))
				rc = fail(&lx, "%s: expected ',' or ']' in the list", field);
		}
		if (!rc && !accept(&lx, ';'))
			accept(&lx, ',');
	}
	/* proto3: an empty model_checkpoint_path is no model_checkpoint_path. */
	if (!rc && (!out->latest || !*out->latest))
		rc = dvar_error_set(DVAR_ECORRUPT, "'%s' names no latest checkpoint (" KEY_LATEST ")",
		                    what);
	if (rc)
		dvar_checkpoint_state_clear(out);
	return rc;
}

int dvar_checkpoint_state_read(dvar_checkpoint_state *out, const char *dir)
{
	if (!out || !dir)
		return dvar_error_set(DVAR_EINVAL, "dvar_checkpoint_state_read: NULL argument");
	memset(out, 0, sizeof(*out));
	char *path = dvar_path_join(dir, DVAR_POINTER_NAME), *text = NULL;
	size_t len;
	int rc;
	if (!path)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (!(rc = dvar_fs_read_file(path, &text, &len, DVAR_STATE_MAX)))
		rc = dvar_checkpoint_state_parse(out, text, len, path);
	free(text);
	free(path);
	return rc;
}
