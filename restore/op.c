/*
 * restore/op.c - what every offline operation does with its caller's
 * callbacks: progress at a human pace, notes, cancellation, and the checks
 * of its options' version and thread count.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "restore/restore.h"

void dvar_op_init(dvar_op *op, const dvar_callbacks *cb, uint64_t total)
{
	memset(op, 0, sizeof(*op));
	if (cb)
		op->cb = *cb;
	op->total = total;
}

int dvar_op_check(const dvar_op *op, const char *what)
{
	if (op->cb.cancel && *op->cb.cancel)
		return dvar_error_set(DVAR_ECANCELED, "%s: cancelled", what);
	return DVAR_OK;
}

void dvar_op_advance(dvar_op *op, uint64_t bytes)
{
	op->done += bytes;
	if (op->cb.progress)
		op->cb.progress(op->cb.progress_userdata, op->done, op->total);
}

void dvar_op_written(const dvar_op *op, const char *name, uint64_t bytes)
{
	if (op->cb.written)
		op->cb.written(op->cb.written_userdata, name, bytes);
}

void dvar_op_note(const dvar_op *op, const char *fmt, ...)
{
	char msg[DVAR_ERROR_MESSAGE_MAX];
	va_list ap;

	if (!op->cb.note)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	op->cb.note(op->cb.note_userdata, msg);
}

int dvar_op_threads(int threads)
{
	if (threads > 0)
		return threads;
	return dvar_cpus() > DVAR_OP_THREADS ? DVAR_OP_THREADS : dvar_cpus();
}
