package main

import (
	"debug/elf"
	"path/filepath"
	"strings"
	"testing"
)

// Every function Debian's libibverbs.so.1 and librdmacm.so.1 export, ours
// export too, at the same symbol version: a program linked against theirs
// finds each at load, and a verb the device lacks answers EOPNOTSUPP when
// called (clib/test/extras.c) rather than stopping the program with a symbol
// lookup error. Left out: the provider interface (ibv_cmd_*, the kernel ABI
// copies, driver registration) and the sysfs readers, which have no meaning
// without a kernel device.
func TestCLibrarySymbols(t *testing.T) {
	lib := buildCLib(t)
	skip := func(name string) bool {
		for _, p := range []string{"ibv_cmd_", "ibv_copy_", "__ioctl_", "ibv_register_driver", "ibv_get_sysfs_path",
			"ibv_read_ibdev_sysfs_file"} {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
	for _, so := range []string{"libibverbs.so.1", "librdmacm.so.1"} {
		theirs := exported(t, filepath.Join("/usr/lib/x86_64-linux-gnu", so))
		ours := exported(t, filepath.Join(lib, so))
		for name, ver := range theirs {
			if skip(name) {
				continue
			}
			if got, ok := ours[name]; !ok || got != ver {
				t.Errorf("%s: %s@%s: ours %q", so, name, ver, got)
			}
		}
	}
}

// exported maps the functions a shared object defines to their default
// symbol versions.
func exported(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, s := range syms {
		// The default version of each: a program linked now binds to it
		// (an older, hidden one serves binaries linked long ago).
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC && !(s.HasVersion && s.VersionIndex.IsHidden()) {
			m[s.Name] = s.Version
		}
	}
	return m
}
