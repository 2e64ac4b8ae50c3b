// tests/headertest.cc - the public headers compile as C++ (see headertest.c),
// the positional _INIT macros included.
#include "headertest.h"

int main()
{
	dvar_shape s;
	dvar_free(nullptr);
	return check_options() + (dvar_shape_init(&s, 0, nullptr) == DVAR_OK &&
	                          dvar_strerror(DVAR_EIO)[0] ? 0 : 1);
}
