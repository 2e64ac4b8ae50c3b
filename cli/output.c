/*
 * cli/output.c - how the command reports errors and formats numbers: error
 * lines on stderr in one shape ("dvar <cmd>: <message>"), byte sizes, and
 * values printed with just enough digits to read back exactly.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The name of a dvar_code as the header spells it, for JSON error documents. */
static const char *code_name(int code)
{
	static const char *const names[] = {
		"DVAR_OK", "DVAR_ERROR", "DVAR_ENOTFOUND", "DVAR_EEXISTS", "DVAR_EINVAL",
		"DVAR_ENOMEM", "DVAR_EIO", "DVAR_ECORRUPT", "DVAR_EVERSION", "DVAR_ESHAPE",
		"DVAR_ECOMM", "DVAR_EDEVICE", "DVAR_ENOTSUPP", "DVAR_EMISMATCH", "DVAR_ECANCELED"
	};

	return code <= 0 && -code < (int)(sizeof(names) / sizeof(names[0])) ? names[-code]
	                                                                     : "DVAR_ERROR";
}

/* "dvar <cmd>: <message>" on stderr, and in --json mode the error document. */
static void report(const char *cmd, const char *code, const char *message)
{
	fprintf(stderr, "dvar %s: %s\n", cmd, message);
	if (cli_json_mode)
		cli_json_error(code, message);
}

static void verror(const char *cmd, const char *code, const char *fmt, va_list ap)
{
	char message[4096];

	vsnprintf(message, sizeof(message), fmt, ap);
	report(cmd, code, message);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verror(cmd, "usage", fmt, ap);
	va_end(ap);
	fprintf(stderr, "See 'dvar help %s'.\n", cmd);
	return CLI_EXIT_USAGE;
}

int cli_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verror(cmd, "runtime", fmt, ap);
	va_end(ap);
	return CLI_EXIT_RUNTIME;
}

const char *cli_dvar_message(void)
{
	const dvar_error *e = dvar_error_last();

	return e->message[0] ? e->message : dvar_strerror(e->code);
}

int cli_error_dvar(const char *cmd)
{
	report(cmd, code_name(dvar_error_last()->code), cli_dvar_message());
	return CLI_EXIT_RUNTIME;
}

/* Levenshtein distance, ignoring ASCII case; SIZE_MAX when out of memory. */
static size_t edit_distance(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	size_t *row = malloc((nb + 1) * sizeof(*row));

	if (!row)
		return SIZE_MAX;
	for (size_t k = 0; k <= nb; k++)
		row[k] = k;
	for (size_t i = 1; i <= na; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t k = 1; k <= nb; k++) {
			size_t up = row[k];
			size_t best = diag + (tolower((unsigned char)a[i - 1]) !=
			                      tolower((unsigned char)b[k - 1]));
			if (up + 1 < best)
				best = up + 1;
			if (row[k - 1] + 1 < best)
				best = row[k - 1] + 1;
			diag = up;
			row[k] = best;
		}
	}
	size_t d = row[nb];
	free(row);
	return d;
}

void cli_suggest_init(cli_suggest *s, const char *typed)
{
	size_t limit = strlen(typed) / 3;

	s->typed = typed;
	s->n = 0;
	s->dist = limit ? limit : 1; /* the farthest a suggestion may be */
}

void cli_suggest_add(cli_suggest *s, const char *name, const char *compared)
{
	size_t d = edit_distance(s->typed, compared);

	if (d > s->dist)
		return;
	if (d < s->dist) {
		s->dist = d;
		s->n = 0;
	}
	for (int k = 0; k < s->n; k++)
		if (strcmp(s->names[k], name) == 0)
			return;
	if (s->n < CLI_SUGGEST_MAX)
		s->names[s->n++] = name;
}

const char *cli_suggest_text(const cli_suggest *s, const char *prefix, char *buf, size_t cap)
{
	size_t at = 0;

	buf[0] = '\0';
	for (int k = 0; k < s->n && at < cap; k++)
		at += (size_t)snprintf(buf + at, cap - at, "%s'%s%s'", k == 0 ? "; did you mean " :
		                       k + 1 == s->n ? " or " : ", ", prefix, s->names[k]);
	if (s->n && at < cap)
		snprintf(buf + at, cap - at, "?");
	return buf;
}

void cli_format_bytes(char *buf, size_t cap, uint64_t bytes)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes / 1024;
	int u = 0;

	if (bytes < 1024) {
		snprintf(buf, cap, "%" PRIu64 " B", bytes);
		return;
	}
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	snprintf(buf, cap, "%.1f %s", v, units[u]);
}

void cli_format_real(char *buf, size_t cap, double v, int single)
{
	if (isnan(v)) {
		snprintf(buf, cap, "nan");
		return;
	}
	if (isinf(v)) {
		snprintf(buf, cap, v < 0 ? "-inf" : "inf");
		return;
	}
	/* The fewest significant digits that read back: 9 always do for a float, 17 for a double. */
	int digits;
	for (digits = 1; digits < 17; digits++) {
		snprintf(buf, cap, "%.*e", digits - 1, v);
		if (single ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
			break;
	}
	snprintf(buf, cap, "%.*e", digits - 1, v);
	/* Positional between 1e-4 and 1e16, as numpy prints: "100", not "1e+02". */
	int exp10 = atoi(strchr(buf, 'e') + 1);
	if (exp10 >= -4 && exp10 < 16)
		snprintf(buf, cap, "%.*f", digits - 1 - exp10 > 0 ? digits - 1 - exp10 : 0, v);
}

void cli_format_elem(char *buf, size_t cap, int dtype, const void *p)
{
	union {
		int8_t i8; int16_t i16; int32_t i32; int64_t i64;
		uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
		float f32; double f64;
	} v;
	double d;

	/* Integers are printed from their bytes: a double cannot hold every int64. */
	memcpy(&v, p, dvar_dtype_size(dtype));
	switch (dtype) {
	case DVAR_BOOL: snprintf(buf, cap, "%s", v.u8 ? "True" : "False"); break;
	case DVAR_INT8: snprintf(buf, cap, "%" PRId8, v.i8); break;
	case DVAR_INT16: snprintf(buf, cap, "%" PRId16, v.i16); break;
	case DVAR_INT32: snprintf(buf, cap, "%" PRId32, v.i32); break;
	case DVAR_INT64: snprintf(buf, cap, "%" PRId64, v.i64); break;
	case DVAR_UINT8: snprintf(buf, cap, "%" PRIu8, v.u8); break;
	case DVAR_UINT16: snprintf(buf, cap, "%" PRIu16, v.u16); break;
	case DVAR_UINT32: snprintf(buf, cap, "%" PRIu32, v.u32); break;
	case DVAR_UINT64: snprintf(buf, cap, "%" PRIu64, v.u64); break;
	case DVAR_FLOAT64: cli_format_real(buf, cap, v.f64, 0); break;
	default:
		/* float32, and the halves, which a float holds exactly. */
		dvar_dtype_to_f64(&d, dtype, p, 1);
		cli_format_real(buf, cap, d, 1);
		break;
	}
}
