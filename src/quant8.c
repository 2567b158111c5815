// quant8.c: placeholder while the codes are written.
#include "quant8.h"
