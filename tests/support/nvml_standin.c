/*
 * A stand-in libnvidia-ml.so.1 for the tests: no GPU here, so this library implements the
 * few NVML calls ocihook's nvml.py makes, with NVML's signatures and return codes, over a
 * layout compiled in (nvml_layout.h, written by tests/support/nvidia_mig.py):
 *
 *   #define STANDIN_GPUS  {minor, "GPU-...", mig_enabled, first_mig, mig_count,
 *                          brand (nvmlBrandType_t, -1: Not Supported), cc_major, cc_minor,
 *                          "product name", memory bytes (0: Not Supported)}, ...
 *   #define STANDIN_MIGS  {index, "MIG-...", gi, ci, gi_slices, ci_slices, memory MiB}, ...
 *   #define STANDIN_MODE  0 (answer) | 1 (hang in nvmlInit_v2) | 2 (nvmlInit_v2 fails)
 *                         | 3 (answer, and write /proc/self/status to STANDIN_PROBE first)
 *   #define STANDIN_CUDA  the driver's CUDA version as NVML numbers it (12040), 0: Not Supported
 *
 * A MIG device handle points into the MIG table, a GPU handle into the GPU table: the
 * calls tell them apart by address, as NVML tells its handles apart.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvml_layout.h"

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9

struct gpu {
    unsigned minor; const char *uuid; int mig_enabled; int first_mig; int mig_count;
    int brand; int cc_major; int cc_minor; const char *name; unsigned long long memory;
};
struct mig {
    unsigned index; const char *uuid; unsigned gi; unsigned ci;
    unsigned gi_slices; unsigned ci_slices; unsigned long long memory_mb;
};
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount,
        computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

static const struct gpu gpus[] = { STANDIN_GPUS };
static const struct mig migs[] = { STANDIN_MIGS };
static const unsigned ngpus = sizeof(gpus) / sizeof(gpus[0]);
static const unsigned nmigs = sizeof(migs) / sizeof(migs[0]);
static int initialized;

static const struct gpu *as_gpu(const void *handle)
{
    const struct gpu *g = handle;
    return (g >= gpus && g < gpus + ngpus) ? g : NULL;
}

static const struct mig *as_mig(const void *handle)
{
    const struct mig *m = handle;
    return (m >= migs && m < migs + nmigs) ? m : NULL;
}

/* What the process loading NVML is: its /proc/self/status, then "fd N -> TARGET" for
 * each open fd (read before the probe opens anything of its own). */
static void probe(void)
{
#ifdef STANDIN_PROBE
    char fds[4096] = "", line[1024], target[256], buffer[8192];
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *entry;
    int own = dir ? dirfd(dir) : -1;
    while (dir && (entry = readdir(dir)) != NULL) {
        ssize_t n;
        if (entry->d_name[0] == '.' || atoi(entry->d_name) == own)
            continue;
        n = readlinkat(own, entry->d_name, target, sizeof(target) - 1);
        target[n > 0 ? n : 0] = 0;
        snprintf(line, sizeof(line), "fd %s -> %s\n", entry->d_name, target);
        strncat(fds, line, sizeof(fds) - strlen(fds) - 1);
    }
    if (dir) closedir(dir);
    FILE *in = fopen("/proc/self/status", "r");
    FILE *out = fopen(STANDIN_PROBE, "w");
    size_t n;
    if (in && out)
        while ((n = fread(buffer, 1, sizeof(buffer), in)) > 0)
            fwrite(buffer, 1, n, out);
    if (out) fputs(fds, out);
    if (in) fclose(in);
    if (out) fclose(out);
#endif
}

nvmlReturn_t nvmlInit_v2(void)
{
    if (STANDIN_MODE == 1)
        for (;;)
            pause(); /* a hung driver: only SIGKILL ends it */
    if (STANDIN_MODE == 2)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if (STANDIN_MODE == 3)
        probe();
    initialized = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
    initialized = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    *count = ngpus;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, const void **device)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (index >= ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(const void *device, unsigned *minor)
{
    const struct gpu *g = as_gpu(device);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = g->minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(const void *device, char *uuid, unsigned length)
{
    const struct gpu *g = as_gpu(device);
    const struct mig *m = as_mig(device);
    const char *text = g ? g->uuid : m ? m->uuid : NULL;
    if (!text) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(uuid, text);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(const void *device, unsigned *current, unsigned *pending)
{
    const struct gpu *g = as_gpu(device);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->mig_enabled < 0) return NVML_ERROR_NOT_SUPPORTED; /* a GPU without MIG */
    *current = *pending = (unsigned)g->mig_enabled;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(const void *device, unsigned *count)
{
    const struct gpu *g = as_gpu(device);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 7;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(const void *device, unsigned index,
                                                 const void **mig)
{
    const struct gpu *g = as_gpu(device);
    int i;
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    for (i = g->first_mig; i < g->first_mig + g->mig_count; i++)
        if (migs[i].index == index) {
            *mig = &migs[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(const void *device, unsigned *id)
{
    const struct mig *m = as_mig(device);
    if (!m) return NVML_ERROR_NOT_SUPPORTED;
    *id = m->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(const void *device, unsigned *id)
{
    const struct mig *m = as_mig(device);
    if (!m) return NVML_ERROR_NOT_SUPPORTED;
    *id = m->ci;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBrand(const void *device, int *brand)
{
    const struct gpu *g = as_gpu(device);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->brand < 0) return NVML_ERROR_NOT_SUPPORTED;
    *brand = g->brand;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(const void *device, int *major, int *minor)
{
    const struct gpu *g = as_gpu(device);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->cc_major < 0) return NVML_ERROR_NOT_SUPPORTED;
    *major = g->cc_major;
    *minor = g->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (STANDIN_CUDA <= 0) return NVML_ERROR_NOT_SUPPORTED;
    *version = STANDIN_CUDA;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(const void *device, char *name, unsigned length)
{
    const struct gpu *g = as_gpu(device);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(g->name) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(name, g->name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(const void *device, nvmlMemory_t *memory)
{
    const struct gpu *g = as_gpu(device);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->memory) return NVML_ERROR_NOT_SUPPORTED;
    memory->total = g->memory;
    memory->used = g->memory / 100;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(const void *device, nvmlDeviceAttributes_t *attributes)
{
    const struct mig *m = as_mig(device);
    if (!m) return NVML_ERROR_NOT_SUPPORTED; /* whole GPUs: not asked by ocihook */
    memset(attributes, 0, sizeof(*attributes));
    attributes->multiprocessorCount = 16 * m->ci_slices;
    attributes->gpuInstanceSliceCount = m->gi_slices;
    attributes->computeInstanceSliceCount = m->ci_slices;
    attributes->memorySizeMB = m->memory_mb;
    return NVML_SUCCESS;
}
