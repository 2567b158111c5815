#include "check.h"
int main(void){check(1,"placeholder","x");return 0;}
