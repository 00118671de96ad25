package config

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// resolvePaths makes the file's relative paths its folder's, so a config
// means the same whatever directory Manifold is started from: a command
// given as a path (./bin/server; a bare name is looked up on PATH), dir and
// the TLS files. A stdio upstream without dir runs in the folder, so that
// the relative arguments of its command are the folder's too.
func (c *Config) resolvePaths(folder string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(folder, p)
	}
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		if u.IsStdio() {
			if strings.ContainsRune(u.Command[0], filepath.Separator) {
				u.Command[0] = abs(u.Command[0])
			}
			u.Dir = abs(u.Dir)
			if u.Dir == "" {
				u.Dir = folder
			}
		}
		u.TLS.CAFile, u.TLS.CertFile, u.TLS.KeyFile = abs(u.TLS.CAFile), abs(u.TLS.CertFile), abs(u.TLS.KeyFile)
		if u.OAuth != nil {
			u.OAuth.PrivateKeyFile = abs(u.OAuth.PrivateKeyFile)
			u.OAuth.AssertionFile = abs(u.OAuth.AssertionFile)
		}
	}
}

// checkFiles reports the files and programs the config names that are
// missing or unusable.
func (c *Config) checkFiles() []Problem {
	var ps problems
	for i, u := range c.Upstreams {
		at := fmt.Sprintf("upstreams[%d].", i)
		if u.IsStdio() && u.Command[0] != "" {
			if err := runnable(u.Command[0]); err != nil {
				ps.add(at+"command[0]", "%v", err)
			}
			if err := isDir(u.Dir); err != nil {
				ps.add(at+"dir", "%v", err)
			}
		}
		for _, f := range []struct{ key, path string }{{"ca_file", u.TLS.CAFile}, {"cert_file", u.TLS.CertFile}, {"key_file", u.TLS.KeyFile}} {
			if f.path == "" {
				continue
			}
			if fh, err := os.Open(f.path); err != nil {
				ps.add(at+"tls."+f.key, "%v", plain(err))
			} else {
				fh.Close()
			}
		}
		if u.OAuth != nil {
			checkKeyFile(at+"oauth", u.OAuth.PrivateKeyFile, &ps)
			checkAssertionFile(at+"oauth", u.OAuth.AssertionFile, &ps)
		}
	}
	return ps
}

// runnable reports why program cannot be started, if it cannot.
func runnable(program string) error {
	if !strings.ContainsRune(program, filepath.Separator) {
		if _, err := exec.LookPath(program); err != nil {
			return fmt.Errorf("%q is not on PATH", program)
		}
		return nil
	}
	fi, err := os.Stat(program)
	switch {
	case err != nil:
		return plain(err)
	case fi.IsDir():
		return fmt.Errorf("%s is a directory", program)
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not executable", program)
	}
	return nil
}

func isDir(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return plain(err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", path)
	}
	return nil
}

// plain words a file error as "path: reason", without the system call.
func plain(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}
