/*
 * cli/tf.c - what the commands share about TensorFlow checkpoints, which
 * libdvar reads as dvar checkpoints (dvar_reader_open takes a TensorBundle
 * prefix): dtypes dvar has no type for (string tensors, other TF types),
 * TF2's object-based names shortened for display (--short-names) and found
 * by either form, reading string tensors whole, and printing their bytes.
 */
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

int cli_find_var(const char *cmd, const dvar_reader *r, const char *name, size_t *out)
{
	dvar_var_info v;
	size_t match = SIZE_MAX, count = 0;

	if (dvar_reader_find(r, name, out) == DVAR_OK)
		return CLI_EXIT_OK;
	char *message = strdup(cli_dvar_message());
	/* A full TF key where its short name is stored (an export with
	 * --short-names): the one variable it can mean. */
	char *shortened = dvar_short_name(name);
	int found = shortened && strcmp(shortened, name) != 0 &&
	            dvar_reader_find(r, shortened, out) == DVAR_OK;
	dvar_free(shortened);
	if (found) {
		free(message);
		return CLI_EXIT_OK;
	}
	if (!message)
		return cli_error(cmd, "out of memory");
	cli_suggest sg;
	char near[1024];
	cli_suggest_init(&sg, name);
	for (size_t i = 0; i < dvar_reader_num_vars(r); i++) {
		if (dvar_reader_var(r, i, &v) != DVAR_OK)
			continue;
		char *s = dvar_short_name(v.name);
		if (s && strcmp(s, name) == 0) {
			if (count++ == 0)
				match = i;
		}
		/* A TF key is also measured by its short name: "dense/kernal" is near it. */
		cli_suggest_add(&sg, v.name, v.name);
		if (s)
			cli_suggest_add(&sg, v.name, s);
		dvar_free(s);
	}
	int rc = CLI_EXIT_OK;
	/* A short name names its variable, with or without --short-names, when
	 * it names one. */
	if (count == 1) {
		*out = match;
	} else if (count > 1) {
		rc = cli_error(cmd, "%s; '%s' is the short name of %zu variables: give the full name",
		               message, name, count);
	} else {
		rc = cli_error(cmd, "%s%s", message, cli_suggest_text(&sg, "", near, sizeof(near)));
	}
	free(message);
	return rc;
}

/* ---------------------------------------------------------------- strings */

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
