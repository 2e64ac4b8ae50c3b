/*
 * cli/output.c - how the command reports errors and formats numbers: error
 * lines on stderr in one shape ("dvar <cmd>: <message>"), byte sizes, and
 * values printed with just enough digits to read back exactly.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void verror(const char *cmd, const char *fmt, va_list ap)
{
	fprintf(stderr, "dvar %s: ", cmd);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verror(cmd, fmt, ap);
	va_end(ap);
	fprintf(stderr, "See 'dvar help %s'.\n", cmd);
	return CLI_EXIT_USAGE;
}

int cli_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verror(cmd, fmt, ap);
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
	return cli_error(cmd, "%s", cli_dvar_message());
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
