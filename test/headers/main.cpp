// The header translation units are the test: this program links them and
// reports success. A header that does not compile alone fails the build.
#include <cstdio>
int main()
{
    std::puts("every public header compiles on its own");
    return 0;
}
