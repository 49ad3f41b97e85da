/* libsynth: the synthetic accelerator driver's user-space library (for the demo and tests). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#ifndef SYNTH_VERSION
#define SYNTH_VERSION "1.2.3"
#endif

const char *synth_version(void) { return SYNTH_VERSION; }

/* The path this library was loaded from, as the dynamic linker found it. */
const char *synth_library_path(void) {
    Dl_info info;
    if (dladdr((void *)synth_version, &info) && info.dli_fname)
        return info.dli_fname;
    return "?";
}

/* Open a device node read-write, as a driver would; describe the result in msg. */
int synth_open(const char *path, char *msg, size_t len) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, len, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    fstat(fd, &st);
    snprintf(msg, len, "opened %s (%u:%u) read-write", path, major(st.st_rdev), minor(st.st_rdev));
    close(fd);
    return 0;
}
