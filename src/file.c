/* file.c - the library's one way to write a file: a fresh temporary in the
 * target's directory, created exclusively under an unpredictable name,
 * written, flushed to disk, then renamed over the target.  Only a regular
 * file, or a missing one, is replaced (through a symlink, the file it names,
 * created if the link dangles); a device, FIFO or directory is refused.  On
 * any failure the target is as it was and the temporary is gone. */
#define _XOPEN_SOURCE 700  /* fchmod, fsync */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* 64 unpredictable bits: the kernel's, else the clock mixed with the pid and
 * a counter (splitmix64's finalizer). */
static uint64_t tk__random(void)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, &v, sizeof v);
        close(fd);
        if (got == (ssize_t)sizeof v)
            return v;
    }
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 48) ^
        (counter++ * 0x9E3779B97F4A7C15ull);
    v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
    v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
    return v ^ (v >> 31);
}

void tk__out_abort(tk__out *o)
{
    if (o->f)
        fclose(o->f);
    if (o->tmp[0])
        unlink(o->tmp);
    o->f = NULL;
    o->tmp[0] = '\0';
}

/* The file a symlink names, into buf: followed link by link (a relative
 * one from its own directory), as open(O_CREAT) would, whether that file
 * exists or not.  0 when path is no symlink, 1 when buf names the file, -1
 * when the chain is too long or too deep to follow (replacing the link
 * would be wrong).  Not realpath: it fails where the absolute path would
 * pass PATH_MAX (a deep working directory), though the link can be
 * followed. */
static int tk__follow(const char *path, char *buf, size_t size)
{
    char link[4096];
    struct stat st;
    if (strlen(path) >= size)
        return -1;
    snprintf(buf, size, "%s", path);
    for (int hops = 0;; hops++) {
        if (lstat(buf, &st) || !S_ISLNK(st.st_mode))
            return hops > 0;
        if (hops == 40)   /* the kernel's limit (ELOOP) */
            return -1;
        ssize_t n = readlink(buf, link, sizeof link - 1);
        if (n < 0)
            return -1;
        link[n] = '\0';
        char *slash = strrchr(buf, '/');
        size_t dir = link[0] == '/' || !slash ? 0 : (size_t)(slash - buf) + 1;
        if (dir + (size_t)n >= size)
            return -1;
        memcpy(buf + dir, link, (size_t)n + 1);
    }
}

int tk__open_status(int err)
{
    return err == ENOMEM ? TK_ENOMEM : TK_EIO;
}

int tk__out_open(tk__out *o, const char *fn, const char *path)
{
    o->f = NULL;
    o->tmp[0] = '\0';
    if (!*path)
        return tk__fail(TK_EIO, "%s: the path is empty", fn);
    struct stat st;
    bool exists = stat(path, &st) == 0;
    if (!exists && errno != ENOENT)
        return tk__fail(TK_EIO, "%s: cannot write \"%s\": %s", fn, path, strerror(errno));
    if (exists && !S_ISREG(st.st_mode))
        return tk__fail(TK_EIO, "%s: \"%s\" is not a regular file (a %s); only a regular "
                        "file or a missing one is replaced", fn, path,
                        S_ISDIR(st.st_mode) ? "directory" : S_ISFIFO(st.st_mode) ? "FIFO"
                        : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "device" : "socket");
    /* As open(O_WRONLY) would: renaming over it needs only the directory. */
    if (exists && access(path, W_OK) != 0)
        return tk__fail(TK_EIO, "%s: \"%s\" is not writable: %s; it is left as it was", fn,
                        path, strerror(errno));
    /* Through a symlink, write the file it names, so the link stays. */
    char named[sizeof o->target];
    int linked = tk__follow(path, named, sizeof named);
    if (linked < 0)
        return tk__fail(TK_EIO, "%s: cannot follow the symlink \"%s\" to the file it names "
                        "(too long a path, or too many links)", fn, path);
    const char *target = linked ? named : path;
    if (strlen(target) >= sizeof o->target)
        return tk__fail(TK_EIO, "%s: the path \"%s\" is too long", fn, path);
    snprintf(o->target, sizeof o->target, "%s", target);
    /* The temporary's name is short whatever the target's (a name of 250
     * bytes and a suffix would pass NAME_MAX): .tk- and 16 hex digits. */
    const char *slash = strrchr(o->target, '/');
    int dir = slash ? (int)(slash - o->target) + 1 : 0;
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 16; tries++) {
        snprintf(o->tmp, sizeof o->tmp, "%.*s.tk-%016llx", dir, o->target,
                 (unsigned long long)tk__random());
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int err = errno;
        o->tmp[0] = '\0';
        return tk__fail(TK_EIO, "%s: cannot create a temporary next to \"%s\": %s", fn,
                        path, strerror(err));
    }
    if (exists)  /* a replaced file keeps its permissions */
        (void)fchmod(fd, st.st_mode & 07777);
    if (!(o->f = fdopen(fd, "wb"))) {
        int err = errno;
        close(fd);
        tk__out_abort(o);
        return tk__fail(tk__open_status(err), "%s: cannot write \"%s\": %s", fn, path,
                        strerror(err));
    }
    return TK_OK;
}

int tk__out_commit(tk__out *o, const char *fn, const char *path)
{
    int err = ferror(o->f) ? (errno ? errno : EIO) : 0;
    if (!err && fflush(o->f))
        err = errno;
    if (!err && fsync(fileno(o->f)))
        err = errno;
    if (fclose(o->f) && !err)
        err = errno;
    o->f = NULL;
    if (!err && rename(o->tmp, o->target))
        err = errno;
    if (err) {
        tk__out_abort(o);
        return tk__fail(TK_EIO, "%s: writing \"%s\" failed: %s; the file is as it was", fn,
                        path, strerror(err));
    }
    o->tmp[0] = '\0';
    return TK_OK;
}
