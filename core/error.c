/*
 * core/error.c - the thread-local error record behind dvar_error_last(), the
 * helpers that fill it, and the static names of the status codes.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

static _Thread_local int err_code;
static _Thread_local char err_message[DVAR_ERROR_MESSAGE_MAX];
/* What dvar_error_last hands out; refreshed on each call because the address
 * of a thread-local buffer is no constant initializer. */
static _Thread_local dvar_error err_view;

const dvar_error *dvar_error_last(void)
{
	err_view.code = err_code;
	err_view.message = err_message;
	return &err_view;
}

void dvar_error_clear(void)
{
	err_code = DVAR_OK;
	err_message[0] = '\0';
}

const char *dvar_strerror(int code)
{
	switch (code) {
	case DVAR_OK: return "success";
	case DVAR_ERROR: return "error";
	case DVAR_ENOTFOUND: return "not found";
	case DVAR_EEXISTS: return "already exists";
	case DVAR_EINVAL: return "invalid argument";
	case DVAR_ENOMEM: return "out of memory";
	case DVAR_EIO: return "I/O error";
	case DVAR_ECORRUPT: return "corrupt data";
	case DVAR_EVERSION: return "unsupported format version";
	case DVAR_ESHAPE: return "shape mismatch";
	case DVAR_ECOMM: return "communication error";
	case DVAR_EDEVICE: return "device error";
	case DVAR_ENOTSUPP: return "not supported";
	case DVAR_EMISMATCH: return "copies differ";
	case DVAR_ECANCELED: return "cancelled";
	case DVAR_EBUSY: return "busy";
	}
	return "unknown error";
}

const char *dvar_version(void)
{
	return DVAR_VERSION_STRING;
}

/* Format into a scratch buffer first: the arguments may point into
 * err_message itself (restoring or re-wrapping the current message). */
static void format_message(char *out, const char *fmt, va_list ap)
{
	if (vsnprintf(out, DVAR_ERROR_MESSAGE_MAX, fmt, ap) < 0)
		out[0] = '\0';
}

int dvar_error_set(int code, const char *fmt, ...)
{
	char text[DVAR_ERROR_MESSAGE_MAX];
	va_list ap;

	va_start(ap, fmt);
	format_message(text, fmt, ap);
	va_end(ap);
	memcpy(err_message, text, sizeof text);
	err_code = code;
	return code;
}

/* Append s to the message in text, cutting it at the buffer's end. */
static void append(char *text, const char *s)
{
	size_t used = strlen(text);
	size_t n = strnlen(s, DVAR_ERROR_MESSAGE_MAX - 1 - used);

	memcpy(text + used, s, n);
	text[used + n] = '\0';
}

int dvar_error_set_errno(int code, int errnum, const char *fmt, ...)
{
	char text[DVAR_ERROR_MESSAGE_MAX];
	char reason[256];
	const char *why;
	va_list ap;

	va_start(ap, fmt);
	format_message(text, fmt, ap);
	va_end(ap);
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
	why = strerror_r(errnum, reason, sizeof reason);
#else
	why = strerror_r(errnum, reason, sizeof reason) == 0 ? reason : "unknown errno";
#endif
	append(text, ": ");
	append(text, why);
	memcpy(err_message, text, sizeof text);
	err_code = errnum == ENOMEM ? DVAR_ENOMEM : code;
	return err_code;
}

int dvar_error_prefix(const char *fmt, ...)
{
	char text[DVAR_ERROR_MESSAGE_MAX];
	va_list ap;

	va_start(ap, fmt);
	format_message(text, fmt, ap);
	va_end(ap);
	if (err_message[0] != '\0') {
		append(text, ": ");
		append(text, err_message);
	}
	memcpy(err_message, text, sizeof text);
	return err_code;
}

int dvar_error_restore(int code, const char *message)
{
	if (!message)
		message = "";
	if (message != err_message) {
		size_t n = strnlen(message, DVAR_ERROR_MESSAGE_MAX - 1);
		memmove(err_message, message, n);
		err_message[n] = '\0';
	}
	err_code = code;
	return code;
}

int dvar_check_version(const char *what, unsigned int version, unsigned int current)
{
	if (version < 1 || version > current)
		return dvar_error_set(DVAR_EINVAL, "%s: version %u is not one this library knows "
		                      "(1 to %u); initialize it with its _INIT macro or %s_init",
		                      what, version, current, what);
	return DVAR_OK;
}

int dvar_options_init(void *opts, size_t size, const void *tmpl, const char *what,
                      unsigned int version, unsigned int current)
{
	int rc;

	if (!opts)
		return dvar_error_set(DVAR_EINVAL, "%s_init: NULL argument", what);
	if ((rc = dvar_check_version(what, version, current)) != DVAR_OK)
		return rc;
	memcpy(opts, tmpl, size);
	/* Every options and spec struct starts with its version. */
	*(unsigned int *)opts = version;
	return DVAR_OK;
}
