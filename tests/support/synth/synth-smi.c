/* synth-smi: opens the synthetic accelerator's device nodes through libsynth. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

const char *synth_version(void);
const char *synth_library_path(void);
int synth_open(const char *path, char *msg, size_t len);

static int open_one(const char *path) {
    char msg[600];
    int rc = synth_open(path, msg, sizeof msg);
    printf("synth-smi: %s\n", msg);
    return rc;
}

int main(int argc, char **argv) {
    int failed = 0, found = 0;
    printf("synth-smi: libsynth %s loaded from %s\n", synth_version(), synth_library_path());
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            failed |= open_one(argv[i]) != 0;
        return failed;
    }
    DIR *dev = opendir("/dev");
    struct dirent *entry;
    while (dev && (entry = readdir(dev))) {
        if (strncmp(entry->d_name, "synth", 5) != 0)
            continue;
        char path[300];
        snprintf(path, sizeof path, "/dev/%s", entry->d_name);
        failed |= open_one(path) != 0;
        found++;
    }
    if (dev)
        closedir(dev);
    if (!found) {
        printf("synth-smi: no synth devices\n");
        return 2;
    }
    return failed;
}
