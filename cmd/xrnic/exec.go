package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	flag "github.com/spf13/pflag"

	"github.com/xrnic/xrnic/verbs/remote"
)

// xrnic exec runs a program with xrnic's libibverbs.so.1 and librdmacm.so.1
// (clib/, built by `make clib`) in front of the system's, on the daemon's
// device: a libibverbs program then runs unmodified, without root and without
// the kernel's RDMA support.

const execUsage = `usage: xrnic exec [-i IFACE | --attach SOCK] [--lib DIR] -- PROGRAM [ARGS]
`

// execCommand is what `xrnic exec` runs: the program's path, its arguments
// and environment.
func execCommand(args []string) (path string, argv, env []string, err error) {
	fs := flag.NewFlagSet("xrnic exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	iface := fs.StringP("interface", "i", "", "the daemon's interface (its attach socket is "+controlDir+"/IFACE.attach)")
	sock := fs.String("attach", "", "the daemon's attach socket")
	lib := fs.String("lib", "", "the folder of xrnic's libibverbs.so.1 (default: $XRNIC_LIB, else build/lib or lib beside the xrnic binary)")
	help := fs.BoolP("help", "h", false, "show this help")
	if err := fs.Parse(args); err != nil {
		return "", nil, nil, fmt.Errorf("exec: %v", err)
	}
	if *help {
		return "", nil, nil, errHelp
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return "", nil, nil, errors.New("exec: no program (xrnic exec -- PROGRAM [ARGS])")
	}
	if *iface != "" && *sock != "" {
		return "", nil, nil, errors.New("exec: -i and --attach name the same thing: give one")
	}
	if *iface != "" {
		*sock = remote.SocketFor(*iface)
	}
	dir, err := libDir(*lib)
	if err != nil {
		return "", nil, nil, err
	}
	if path, err = exec.LookPath(rest[0]); err != nil {
		return "", nil, nil, fmt.Errorf("exec: %w", err)
	}
	env = os.Environ()
	ld := dir
	if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
		ld += ":" + old
	}
	env = setEnv(env, "LD_LIBRARY_PATH", ld)
	if *sock != "" {
		env = setEnv(env, "XRNIC_ATTACH", *sock)
	}
	return path, rest, env, nil
}

// libDir finds the folder holding xrnic's libibverbs.so.1.
func libDir(flagDir string) (string, error) {
	var cands []string
	switch {
	case flagDir != "":
		cands = []string{flagDir}
	case os.Getenv("XRNIC_LIB") != "":
		cands = []string{os.Getenv("XRNIC_LIB")}
	default:
		if exe, err := os.Executable(); err == nil {
			d := filepath.Dir(exe)
			cands = []string{filepath.Join(d, "build", "lib"), filepath.Join(d, "lib"), filepath.Join(d, "..", "lib", "xrnic")}
		}
	}
	for _, d := range cands {
		if _, err := os.Stat(filepath.Join(d, "libibverbs.so.1")); err == nil {
			return filepath.Abs(d)
		}
	}
	return "", fmt.Errorf("exec: no libibverbs.so.1 of xrnic's in %s (make clib builds it; --lib names its folder)", strings.Join(cands, ", "))
}

func setEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, k+"=") {
			out = append(out, e)
		}
	}
	return append(out, k+"="+v)
}

// runExec replaces the process with the program.
func runExec(args []string, out io.Writer) error {
	path, argv, env, err := execCommand(args)
	if errors.Is(err, errHelp) {
		io.WriteString(out, execUsage)
		return nil
	}
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, env)
}
