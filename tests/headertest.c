/*
 * tests/headertest.c - the public headers compile on their own as strict
 * C11 (-pedantic -Werror) and as C++ (headertest.cc); linking checks that the
 * shared library exports what they declare.
 */
#include "dvar/dvar.h"

int main(void)
{
	dvar_write_options w = DVAR_WRITE_OPTIONS_INIT;
	dvar_read_options r = DVAR_READ_OPTIONS_INIT;
	return (int)(w.version + r.version) - 2 + (dvar_version()[0] == '\0');
}
