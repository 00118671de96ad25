// Command manifold is a caching aggregator for the Model Context Protocol:
// one MCP endpoint in front of many MCP servers.
//
//	manifold serve --config FILE     serve until SIGINT or SIGTERM
//	manifold stdio --config FILE     serve one caller on stdin/stdout
//	manifold validate --config FILE  check a configuration file
//	manifold files DIR               serve a folder as MCP resources on stdio
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/manifold-mcp/manifold/cmd/manifold/process"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/files"
)

const usage = `Manifold: one MCP endpoint in front of many MCP servers.

Usage:
  manifold serve --config FILE      serve the configured endpoint until SIGINT/SIGTERM
  manifold stdio --config FILE      serve one caller on stdin/stdout (for hosts that launch servers)
  manifold validate --config FILE   check a configuration file; exit 1 listing every problem
  manifold files [flags] DIR        serve folder DIR as MCP resources over stdio

Run 'manifold COMMAND --help' for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "stdio":
		return serveStdio(args[1:], stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "files":
		return serveFiles(args[1:], stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "manifold: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func flags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("manifold "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: manifold %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse handles --help (exit 0) and bad flags (exit 2).
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}

func serve(args []string, stderr io.Writer) int {
	fs := flags("serve", "serve --config FILE", stderr)
	path := fs.String("config", "", "configuration `FILE` (YAML)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *path == "" {
		fmt.Fprintln(stderr, "manifold serve: --config is required")
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	log := newLogger(cfg.Log, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := process.New(cfg, log)
	if err != nil {
		log.Error("startup failed", "err", err)
		return 1
	}
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("listen failed", "addr", cfg.Listen, "err", err)
		return 1
	}
	if err := srv.Serve(ctx, l); err != nil {
		log.Error("server stopped", "err", err)
		return 1
	}
	log.Info("manifold stopped")
	return 0
}

// serveStdio is the whole proxy on stdin and stdout; logs go to stderr
// only, and the process exits when stdin closes, after stopping its
// upstream processes.
func serveStdio(args []string, stderr io.Writer) int {
	fs := flags("stdio", "stdio --config FILE", stderr)
	path := fs.String("config", "", "configuration `FILE` (YAML)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *path == "" {
		fmt.Fprintln(stderr, "manifold stdio: --config is required")
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	log := newLogger(cfg.Log, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	p, err := process.New(cfg, log)
	if err != nil {
		log.Error("startup failed", "err", err)
		return 1
	}
	if err := p.ServeStdio(ctx, os.Stdin, os.Stdout); err != nil {
		log.Error("stdio stopped", "err", err)
		return 1
	}
	return 0
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func validate(args []string, stdout, stderr io.Writer) int {
	fs := flags("validate", "validate --config FILE", stderr)
	path := fs.String("config", "", "configuration `FILE` (YAML)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *path == "" {
		fmt.Fprintln(stderr, "manifold validate: --config is required")
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "%s: warning: %s\n", *path, w)
	}
	fmt.Fprintf(stdout, "%s: ok (%d upstreams)\n", *path, len(cfg.Upstreams))
	return 0
}

func serveFiles(args []string, stderr io.Writer) int {
	fs := flags("files", "files [flags] DIR", stderr)
	pageSize := fs.Int("page-size", 100, "resources per resources/list page")
	ttl := fs.Duration("ttl", 5*time.Second, "ttlMs cache hint on results")
	poll := fs.Duration("poll", time.Second, "how often subscribed files are checked for changes")
	maxFile := fs.Int64("max-file-bytes", 8<<20, "largest file resources/read returns")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "manifold files: exactly one folder is required")
		fs.Usage()
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	srv, err := files.New(fs.Arg(0), files.Options{PageSize: *pageSize, TTL: *ttl, Poll: *poll, MaxFileBytes: *maxFile, Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, "manifold files:", err)
		return 1
	}
	defer srv.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, os.Stdin, os.Stdout) }()
	select {
	case err := <-errc:
		if err != nil {
			log.Error("files server stopped", "err", err)
			return 1
		}
	case <-ctx.Done(): // a signal: stop now, even with stdin still open
	}
	return 0
}
