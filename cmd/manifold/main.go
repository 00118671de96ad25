// Command manifold is a caching aggregator for the Model Context Protocol:
// one MCP endpoint in front of many MCP servers.
//
//	manifold serve --config FILE     serve until SIGINT or SIGTERM (--listen ADDR: elsewhere than the file says)
//	manifold stdio --config FILE     serve one caller on stdin/stdout
//	manifold validate --config FILE  check a configuration file
//	manifold files DIR               serve a folder as MCP resources (and a search tool) on stdio
//	manifold version                 print the version
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/manifold-mcp/manifold/cmd/manifold/process"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/files"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/telemetry"
)

const usage = `Manifold: one MCP endpoint in front of many MCP servers.

Usage:
  manifold serve --config FILE      serve the configured endpoint until SIGINT/SIGTERM (SIGHUP reloads);
                                    --listen ADDR serves on ADDR (host:port) instead of the file's listen
  manifold stdio --config FILE      serve one caller on stdin/stdout (for hosts that launch servers; SIGHUP reloads);
                                    --endpoint PATH serves that curated endpoint's view
  manifold validate --config FILE   check a configuration file; exit 1 listing every problem
  manifold files [flags] DIR        serve folder DIR as MCP resources, and a search tool, over stdio
  manifold version                  print the version

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
		return serve(args[1:], stdout, stderr)
	case "stdio":
		return serveStdio(args[1:], stdout, stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "files":
		return serveFiles(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "manifold", mcp.BuildVersion)
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "manifold: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// flags returns a command's flag set. Its usage lists the flags as the
// README writes them (--config FILE).
func flags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("manifold "+name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: manifold %s\n\nFlags:\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			arg, text := flag.UnquoteUsage(f)
			fmt.Fprintf(w, "  --%s %s\n    \t%s", f.Name, arg, text)
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				fmt.Fprintf(w, " (default %s)", f.DefValue)
			}
			fmt.Fprintln(w)
		})
	}
	return fs
}

// parse handles --help (usage on stdout, exit 0) and bad flags (the error
// and usage on stderr, exit 2).
func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, false
	case err != nil:
		fs.SetOutput(stderr)
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return 2, false
	}
	return 0, true
}

// setup is a command's own flags: how its usage line shows them, and a
// function that adds them and returns what checks their values against the
// configuration before anything starts.
type setup struct {
	usage string
	add   func(fs *flag.FlagSet) (check func(*config.Config) error)
	// over, when set, gives what the flags set over the file's values.
	over func(*config.Flags) error
}

// loadConfig parses a command's flags and loads the --config file. When ok
// is false the command is over, with code.
func loadConfig(name string, args []string, stdout, stderr io.Writer, more ...setup) (cfg *config.Config, code int, ok bool) {
	synopsis := name + " --config FILE"
	for _, f := range more {
		synopsis += " " + f.usage
	}
	fs := flags(name, synopsis)
	path := fs.String("config", "", "configuration `FILE` (YAML)")
	var checks []func(*config.Config) error
	for _, f := range more {
		checks = append(checks, f.add(fs))
	}
	if code, ok := parse(fs, args, stdout, stderr); !ok {
		return nil, code, false
	}
	if *path == "" {
		fmt.Fprintf(stderr, "manifold %s: --config is required\n", name)
		return nil, 2, false
	}
	var over config.Flags
	for _, f := range more {
		if f.over == nil {
			continue
		}
		if err := f.over(&over); err != nil {
			fmt.Fprintf(stderr, "manifold %s: %v\n", name, err)
			return nil, 2, false
		}
	}
	cfg, err := config.LoadWith(*path, over)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, 1, false
	}
	for _, check := range checks {
		if check == nil {
			continue
		}
		if err := check(cfg); err != nil {
			fmt.Fprintf(stderr, "manifold %s: %v\n", name, err)
			return nil, 2, false
		}
	}
	return cfg, 0, true
}

func serve(args []string, stdout, stderr io.Writer) int {
	var listen *string
	at := setup{usage: "[--listen ADDR]", add: func(fs *flag.FlagSet) func(*config.Config) error {
		listen = fs.String("listen", "", "serve on `ADDR` (host:port) instead of the file's listen")
		return nil
	}, over: func(f *config.Flags) error {
		if *listen == "" {
			return nil
		}
		if _, _, err := net.SplitHostPort(*listen); err != nil {
			return fmt.Errorf("--listen %s: must be host:port: %w", *listen, err)
		}
		f.Listen = *listen
		return nil
	}}
	return runProcess("serve", args, stdout, stderr, func(ctx context.Context, p *process.Process, cfg *config.Config, log *slog.Logger) int {
		l, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			log.Error("listen failed", "addr", cfg.Listen, "err", err)
			return 1
		}
		if err := p.Serve(ctx, l); err != nil {
			log.Error("server stopped", "err", err)
			return 1
		}
		log.Info("manifold stopped")
		return 0
	}, at)
}

// runProcess is what serve and stdio share: the configuration, the logger,
// the signals (SIGINT and SIGTERM end ctx; SIGHUP reloads, also in stdio
// mode, where a host may send it and it must not end the session), tracing
// and the process, which serveWith then serves until ctx ends; it returns
// the exit code.
func runProcess(name string, args []string, stdout, stderr io.Writer, serveWith func(context.Context, *process.Process, *config.Config, *slog.Logger) int, more ...setup) int {
	newProcess := process.New
	if name == "stdio" {
		newProcess = process.NewStdio
	}
	cfg, code, ok := loadConfig(name, args, stdout, stderr, more...)
	if !ok {
		return code
	}
	// The console exporter's spans and the log share stderr, a line each.
	stderr = &lineWriter{w: stderr}
	log := newLogger(cfg.Log, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	stopTracing, err := telemetry.Start(ctx, mcp.BuildVersion, log, stderr)
	if err != nil {
		log.Error("startup failed", "err", err)
		return 1
	}
	defer flushTraces(stopTracing, log)
	p, err := newProcess(cfg, log)
	if err != nil {
		log.Error("startup failed", "err", err)
		return 1
	}
	go reloadOnHangup(ctx, p, log)
	return serveWith(ctx, p, cfg, log)
}

// lineWriter serializes the writes of several writers (the log, the
// console's spans), each a whole line, so that none lands inside another.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// reloadOnHangup reloads the configuration on each SIGHUP until ctx ends.
func reloadOnHangup(ctx context.Context, srv *process.Process, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			log.Info("SIGHUP: reloading the configuration")
			_ = srv.Reload(ctx) // Reload logs its outcome
		}
	}
}

func flushTraces(stop func(context.Context) error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stop(ctx); err != nil {
		log.Warn("flushing traces", "err", err)
	}
}

// serveStdio is the whole proxy on stdin and stdout; logs go to stderr
// only, and the process exits when stdin closes, after stopping its
// upstream processes.
func serveStdio(args []string, stdout, stderr io.Writer) int {
	var endpoint *string
	at := setup{usage: "[--endpoint PATH]", add: func(fs *flag.FlagSet) func(*config.Config) error {
		endpoint = fs.String("endpoint", "", "serve the curated endpoint at `PATH` (one of the configuration's endpoints); default: /mcp, everything")
		return func(cfg *config.Config) error { return stdioEndpoint(cfg, *endpoint) }
	}}
	return runProcess("stdio", args, stdout, stderr, func(ctx context.Context, p *process.Process, _ *config.Config, log *slog.Logger) int {
		if err := p.ServeStdioAt(ctx, *endpoint, os.Stdin, os.Stdout); err != nil {
			log.Error("stdio stopped", "err", err)
			return 1
		}
		return 0
	}, at)
}

// stdioEndpoint checks --endpoint: a configured endpoint's path (or /mcp)
// that a caller without a principal may use.
func stdioEndpoint(cfg *config.Config, at string) error {
	if at == "" || at == "/mcp" {
		return nil
	}
	var paths []string
	for _, e := range cfg.Endpoints {
		if e.Path != at {
			paths = append(paths, e.Path)
			continue
		}
		if len(e.Access) > 0 {
			return fmt.Errorf("--endpoint %s: the endpoint admits only the principals its access rules name, and a stdio caller has none", at)
		}
		return nil
	}
	if len(paths) == 0 {
		return fmt.Errorf("--endpoint %s: the configuration has no endpoints", at)
	}
	return fmt.Errorf("--endpoint %s is not a configured endpoint (these are: %s)", at, strings.Join(paths, ", "))
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
	cfg, code, ok := loadConfig("validate", args, stdout, stderr)
	if !ok {
		return code
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "%s: warning: %s\n", cfg.File, w)
	}
	noun := "upstreams"
	if len(cfg.Upstreams) == 1 {
		noun = "upstream"
	}
	fmt.Fprintf(stdout, "%s: ok (%d %s)\n", cfg.File, len(cfg.Upstreams), noun)
	return 0
}

func serveFiles(args []string, stdout, stderr io.Writer) int {
	fs := flags("files", "files [flags] DIR")
	pageSize := fs.Int("page-size", 100, "resources per resources/list page")
	ttl := fs.Duration("ttl", 5*time.Second, "ttlMs cache hint on results")
	poll := fs.Duration("poll", time.Second, "how often subscribed files are checked for changes")
	maxFile := fs.Int64("max-file-bytes", 8<<20, "largest file resources/read returns, and how much of each file the search tool reads")
	if code, ok := parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "manifold files: exactly one folder is required")
		fs.SetOutput(stderr)
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
