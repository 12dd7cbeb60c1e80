// A shared object without the provider entry symbol: must be skipped.
extern "C" int shunt_something_else() { return 7; }
