/*
 * cli/tf.c - what the commands share about TensorFlow checkpoints, which
 * libdvar reads as dvar checkpoints (dvar_reader_open takes a TensorBundle
 * prefix): dtypes dvar has no type for (string tensors, other TF types),
 * TF2's object-based names shortened for display (--short-names) and found
 * by either form, reading string tensors whole, printing their bytes, and
 * TF's `checkpoint` state file, which `dvar ls` reads itself.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ---------------------------------------------------------------- dtypes */

const char *cli_dtype_text(int dtype, char *buf, size_t cap)
{
	const char *name = dvar_dtype_name(dtype);

	if (dtype == DVAR_DTYPE_STRING)
		snprintf(buf, cap, "string");
	else if (name)
		snprintf(buf, cap, "%s", name);
	else
		snprintf(buf, cap, "dtype %d", dtype);
	return buf;
}

int cli_dtype_numeric(int dtype)
{
	return dtype != DVAR_DTYPE_STRING && dvar_dtype_name(dtype) && dvar_dtype_size(dtype) > 0;
}

int cli_error_dtype(const char *cmd, const char *name, int dtype)
{
	return cli_error(cmd, "variable '%s' has dtype %d, a TensorFlow DataType dvar has no type "
	                      "for: its values cannot be read", name, dtype);
}

/* ------------------------------------------------------------ short names */

#define ATTRS "/.ATTRIBUTES/"
#define VALUE ATTRS "VARIABLE_VALUE"
#define SLOT "/.OPTIMIZER_SLOT/"

char *cli_short_name(const char *name)
{
	size_t len = strlen(name), vlen = strlen(VALUE);
	char *out = malloc(len + 1), *o = out;

	if (!out)
		return NULL;
	if (len > vlen && strcmp(name + len - vlen, VALUE) == 0)
		len -= vlen;
	for (size_t i = 0; i < len;) {
		if (strncmp(name + i, SLOT, strlen(SLOT)) == 0 && i + strlen(SLOT) <= len) {
			*o++ = '@';
			i += strlen(SLOT);
		} else if (strncmp(name + i, ATTRS, strlen(ATTRS)) == 0 && i + strlen(ATTRS) <= len) {
			*o++ = ':';
			i += strlen(ATTRS);
		} else {
			*o++ = name[i++];
		}
	}
	*o = '\0';
	return out;
}

int cli_find_var(const char *cmd, const dvar_reader *r, const char *name, int short_names,
                 size_t *out)
{
	dvar_var_info v;
	size_t match = SIZE_MAX, count = 0;

	if (dvar_reader_find(r, name, out) == DVAR_OK)
		return CLI_EXIT_OK;
	char *message = strdup(cli_dvar_message());
	if (!message)
		return cli_error(cmd, "out of memory");
	for (size_t i = 0; i < dvar_reader_num_vars(r); i++) {
		if (dvar_reader_var(r, i, &v) != DVAR_OK)
			continue;
		char *s = cli_short_name(v.name);
		if (s && strcmp(s, name) == 0) {
			if (count++ == 0)
				match = i;
		}
		free(s);
	}
	int rc = CLI_EXIT_OK;
	if (count == 1 && dvar_reader_var(r, match, &v) == DVAR_OK) {
		if (short_names)
			*out = match;
		else
			rc = cli_error(cmd, "%s; with --short-names, '%s' names '%s'", message, name, v.name);
	} else if (count > 1) {
		rc = cli_error(cmd, "%s; '%s' is the short name of %zu variables: give the full name",
		               message, name, count);
	} else {
		rc = cli_error(cmd, "%s", message);
	}
	free(message);
	return rc;
}

/* ---------------------------------------------------------------- strings */

int cli_read_strings(const char *cmd, dvar_reader *r, size_t i, uint64_t n, uint64_t **lens,
                     char **bytes, uint64_t *total)
{
	dvar_var_info v;
	*bytes = NULL;
	*total = 0;
	if (dvar_reader_var(r, i, &v) != DVAR_OK)
		return cli_error_dvar(cmd);
	if (n > SIZE_MAX / sizeof(uint64_t) || !(*lens = malloc((size_t)(n ? n : 1) * sizeof(uint64_t))))
		return cli_error(cmd, "out of memory");
	/* The stored bytes hold the strings and more: one read, no sizing pass. */
	if (v.stored_bytes >= SIZE_MAX || !(*bytes = malloc((size_t)v.stored_bytes + 1))) {
		free(*lens);
		*lens = NULL;
		return cli_error(cmd, "out of memory (%llu bytes of strings)",
		                 (unsigned long long)v.stored_bytes);
	}
	if (dvar_reader_read_strings(r, i, *lens, n, *bytes, v.stored_bytes, total) == DVAR_OK)
		return CLI_EXIT_OK;
	free(*lens);
	free(*bytes);
	*lens = NULL;
	*bytes = NULL;
	return cli_error_dvar(cmd);
}

void cli_print_cstring(FILE *f, const void *data, uint64_t n)
{
	const unsigned char *p = data;

	fputc('"', f);
	for (uint64_t k = 0; k < n; k++) {
		switch (p[k]) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (p[k] < 0x20 || p[k] > 0x7e)
				fprintf(f, "\\x%02x", p[k]);
			else
				fputc(p[k], f);
			break;
		}
	}
	fputc('"', f);
}

/* ------------------------------------------------------------- state file */

void cli_tf_state_clear(cli_tf_state *s)
{
	free(s->latest);
	for (size_t k = 0; k < s->num_all; k++)
		free(s->all[k]);
	free(s->all);
	memset(s, 0, sizeof(*s));
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * A text-format string (protobuf's C escapes: \n \r \t \" \' \\, octal
 * \NNN, hex \xNN) starting at the quote s; the value malloc'ed, *end after
 * the closing quote. NULL when it does not parse (or holds a NUL byte).
 */
static char *parse_string(const char *s, const char **end)
{
	char quote = *s;
	size_t n = 0;

	if (quote != '"' && quote != '\'')
		return NULL;
	char *out = malloc(strlen(s) + 1);
	if (!out)
		return NULL;
	for (s++; *s && *s != quote; s++) {
		int c = (unsigned char)*s;
		if (c == '\\') {
			s++;
			switch (*s) {
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case '"': case '\'': case '\\': c = *s; break;
			case 'x':
				if (hexval(s[1]) < 0)
					goto bad;
				c = hexval(*++s);
				if (hexval(s[1]) >= 0)
					c = c * 16 + hexval(*++s);
				break;
			default:
				if (*s < '0' || *s > '7')
					goto bad;
				c = *s - '0';
				for (int d = 0; d < 2 && s[1] >= '0' && s[1] <= '7'; d++)
					c = c * 8 + (*++s - '0');
				if (c > 0xff)
					goto bad;
				break;
			}
		}
		if (c == 0)
			goto bad;
		out[n++] = (char)c;
	}
	if (*s != quote)
		goto bad;
	out[n] = '\0';
	*end = s + 1;
	return out;
bad:
	free(out);
	return NULL;
}

int cli_tf_state_read(const char *dir, cli_tf_state *out, char *err, size_t cap)
{
	size_t plen = strlen(dir) + sizeof("/checkpoint");
	char *path = malloc(plen), *text = NULL;
	size_t len = 0, at = 0;
	int rc = 0, lineno = 0;

	memset(out, 0, sizeof(*out));
	if (!path) {
		snprintf(err, cap, "out of memory");
		return -1;
	}
	snprintf(path, plen, "%s/checkpoint", dir);
	FILE *f = fopen(path, "rb");
	if (!f) {
		rc = errno == ENOENT ? 0 : -1;
		if (rc)
			snprintf(err, cap, "cannot read '%s': %s", path, strerror(errno));
		free(path);
		return rc;
	}
	/* A state file is a few lines; a megabyte is plenty. */
	const size_t max = 1u << 20;
	if (!(text = malloc(max + 1))) {
		fclose(f);
		free(path);
		snprintf(err, cap, "out of memory");
		return -1;
	}
	len = fread(text, 1, max + 1, f);
	fclose(f);
	if (len > max || memchr(text, '\0', len)) {
		snprintf(err, cap, "'%s' is not a checkpoint state file", path);
		rc = -1;
		goto done;
	}
	text[len] = '\0';
	rc = 1;
	while (at < len && rc == 1) {
		char *line = text + at, *nl = strchr(line, '\n');
		at = nl ? (size_t)(nl - text) + 1 : len;
		if (nl)
			*nl = '\0';
		lineno++;
		while (*line == ' ' || *line == '\t' || *line == '\r')
			line++;
		if (!*line || *line == '#')
			continue;
		char *colon = strchr(line, ':');
		if (!colon) {
			snprintf(err, cap, "'%s' line %d is not `field: value`", path, lineno);
			rc = -1;
			break;
		}
		*colon = '\0';
		int is_latest = strcmp(line, "model_checkpoint_path") == 0;
		int is_all = strcmp(line, "all_model_checkpoint_paths") == 0;
		if (!is_latest && !is_all)
			continue; /* timestamps */
		const char *v = colon + 1, *end = NULL;
		while (*v == ' ' || *v == '\t')
			v++;
		char *value = parse_string(v, &end);
		while (end && (*end == ' ' || *end == '\t' || *end == '\r'))
			end++;
		if (!value || (*end && *end != '#') || !value[0]) {
			free(value);
			snprintf(err, cap, "'%s' line %d: %s is not a quoted path", path, lineno, line);
			rc = -1;
			break;
		}
		if (is_latest) {
			free(out->latest);
			out->latest = value;
			continue;
		}
		char **grown = realloc(out->all, (out->num_all + 1) * sizeof(char *));
		if (!grown) {
			free(value);
			snprintf(err, cap, "out of memory");
			rc = -1;
			break;
		}
		out->all = grown;
		out->all[out->num_all++] = value;
	}
	if (rc == 1 && !out->latest) {
		snprintf(err, cap, "'%s' names no model_checkpoint_path", path);
		rc = -1;
	}
done:
	if (rc < 0)
		cli_tf_state_clear(out);
	free(text);
	free(path);
	return rc;
}
