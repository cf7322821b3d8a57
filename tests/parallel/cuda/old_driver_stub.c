/* A CUDA driver too old for the runtime: a libcuda.so.1 that says it is
 * CUDA 10.0 and does nothing else, so the runtime answers every call with
 * cudaErrorInsufficientDriver (old_driver.sh puts it first on the library
 * path). */
int cuDriverGetVersion(int *version);
int cuInit(unsigned flags);

int cuDriverGetVersion(int *version)
{
    *version = 10000;
    return 0;
}

int cuInit(unsigned flags)
{
    (void)flags;
    return 0;
}
