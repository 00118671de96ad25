// Package files is a small MCP server that exposes one folder as resources,
// over stdio: `manifold files DIR`.
//
// It is modern (2026-07-28: server/discover, `_meta` on every request, cache
// hints on results) and answers the legacy initialize handshake too, so it
// serves as an upstream of either era. Every file under DIR is a resource
// `file:///relative/path`; the template `file:///{path}` names them all.
// One read-only tool, search, finds the files that contain words
// (search.go).
//
// The folder is opened as an os.Root, so no path, however it is spelt, can
// leave it: `..` segments, absolute paths, encoded separators and NUL bytes are
// refused before the file system is asked, and a symbolic link that points
// outside DIR fails inside the kernel's own resolution. Dot files and dot
// directories are neither listed nor readable.
package files

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// Options tune a Server.
type Options struct {
	// PageSize is how many resources one resources/list page holds.
	PageSize int
	// TTL is the ttlMs hint on results.
	TTL time.Duration
	// MaxFileBytes bounds a file that resources/read will return, and what
	// the search tool reads of each file.
	MaxFileBytes int64
	// Poll is how often subscribed files are checked for changes.
	Poll   time.Duration
	Logger *slog.Logger
}

// Server serves one folder.
type Server struct {
	root *os.Root
	o    Options

	wmu sync.Mutex
	out io.Writer

	subs *watcher
}

// ServerInfo names this server.
var ServerInfo = mcp.Implementation{Name: "manifold-files", Version: mcp.ServerInfo.Version}

// New opens dir.
func New(dir string, o Options) (*Server, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open folder: %w", err)
	}
	if o.PageSize <= 0 {
		o.PageSize = 100
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 8 << 20
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Server{root: root, o: o}
	s.subs = newWatcher(s)
	return s, nil
}

// Close releases the folder.
func (s *Server) Close() error { return s.root.Close() }

// Serve reads newline-delimited JSON-RPC from in and answers on out until in
// ends or ctx is done.
func (s *Server) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	s.out = out
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.subs.run(ctx)
	br := bufio.NewReaderSize(in, 64<<10)
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, 16)
	for {
		line, err := br.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			msg, rpcErr := jsonrpc.Decode(line)
			switch {
			case rpcErr != nil:
				var id json.RawMessage
				if msg != nil {
					id = msg.ID
				}
				s.write(jsonrpc.AppendError(nil, id, rpcErr))
			case msg.IsRequest():
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					s.handle(ctx, msg)
				}()
			case msg.IsNotification():
				s.notification(msg)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read stdin: %w", err)
		}
	}
}

func (s *Server) write(b []byte) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, _ = s.out.Write(append(b, '\n'))
}

func (s *Server) notification(msg *jsonrpc.Message) {
	if msg.Method == mcp.NotifyInitialized {
		s.subs.initialized()
	}
	if msg.Method == mcp.NotifyCancelled {
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(msg.Params, &p) == nil {
			s.subs.cancel(p.RequestID)
		}
	}
}

// request is a decoded request and the era it was sent in.
type request struct {
	id     json.RawMessage
	method string
	params jsonrpc.Object
	modern bool
}

func (s *Server) handle(ctx context.Context, msg *jsonrpc.Message) {
	params, err := jsonrpc.ParseObject(msg.Params)
	if err != nil {
		s.write(jsonrpc.AppendError(nil, msg.ID, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params must be an object")))
		return
	}
	meta, _ := params.Object("_meta")
	req := &request{id: msg.ID, method: msg.Method, params: params, modern: meta.String(mcp.MetaProtocolVersion) != ""}
	if req.modern && meta.String(mcp.MetaProtocolVersion) != mcp.Version {
		s.fail(req, jsonrpc.Errorf(jsonrpc.CodeUnsupportedVersion, "unsupported protocol version").
			WithData(map[string]any{"supported": append([]string{mcp.Version}, mcp.Legacy...), "requested": meta.String(mcp.MetaProtocolVersion)}))
		return
	}
	var res any
	var rpcErr *jsonrpc.Error
	switch {
	case msg.Method == mcp.MethodInitialize && !req.modern:
		res = s.initialize(params)
	case msg.Method == mcp.MethodPing && !req.modern:
		res = struct{}{}
	case msg.Method == mcp.MethodDiscover && req.modern:
		res = s.discover()
	case msg.Method == mcp.MethodResourcesList:
		res, rpcErr = s.list(params)
	case msg.Method == mcp.MethodTemplatesList:
		res = map[string]any{"resourceTemplates": []map[string]string{{
			"uriTemplate": "file:///{path}", "name": "file",
			"description": "Any file in the folder, by its path relative to the folder",
		}}}
	case msg.Method == mcp.MethodResourcesRead:
		res, rpcErr = s.read(params)
	case msg.Method == mcp.MethodToolsList:
		res = s.tools()
	case msg.Method == mcp.MethodToolsCall:
		res, rpcErr = s.call(ctx, params)
	case msg.Method == mcp.MethodSubscriptions && req.modern:
		s.subs.listen(ctx, req)
		return
	case (msg.Method == mcp.MethodSubscribe || msg.Method == mcp.MethodUnsubscribe) && !req.modern:
		rpcErr = s.subs.legacy(req)
		res = struct{}{}
	default:
		rpcErr = jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "method %q not found", msg.Method)
	}
	if rpcErr != nil {
		s.fail(req, rpcErr)
		return
	}
	s.reply(req, res)
}

func (s *Server) fail(req *request, e *jsonrpc.Error) {
	s.write(jsonrpc.AppendError(nil, req.id, e))
}

// reply sends res, adding what a modern result carries.
func (s *Server) reply(req *request, res any) {
	b, err := json.Marshal(res)
	if err != nil {
		s.fail(req, jsonrpc.Errorf(jsonrpc.CodeInternalError, "encode result: %v", err))
		return
	}
	if req.modern {
		obj, _ := jsonrpc.ParseObject(b)
		_ = obj.Set("resultType", mcp.ResultTypeComplete)
		_ = obj.Set("_meta", map[string]any{mcp.MetaServerInfo: ServerInfo})
		if mcp.Cacheable(req.method) {
			_ = obj.Set("ttlMs", s.o.TTL.Milliseconds())
			_ = obj.Set("cacheScope", mcp.ScopePublic)
		}
		b = obj.Marshal()
	}
	s.write(jsonrpc.AppendResult(nil, req.id, b))
}

func (s *Server) capabilities() mcp.Capabilities {
	return mcp.Capabilities{Resources: &mcp.ResourcesCapability{Subscribe: true, ListChanged: true}, Tools: &mcp.ListCapability{}}
}

func (s *Server) initialize(params jsonrpc.Object) any {
	version := params.String("protocolVersion")
	if !mcp.IsLegacy(version) {
		version = mcp.Legacy[0]
	}
	return map[string]any{"protocolVersion": version, "capabilities": s.capabilities(), "serverInfo": ServerInfo}
}

func (s *Server) discover() any {
	return map[string]any{"supportedVersions": append([]string{mcp.Version}, mcp.Legacy...), "capabilities": s.capabilities()}
}

type resource struct {
	URI      string `json:"uri"`
	Name     string `json:"name"`
	MIMEType string `json:"mimeType,omitempty"`
	Size     int64  `json:"size"`
}

// maxListed bounds a listing, so a huge tree cannot exhaust memory.
const maxListed = 100_000

func (s *Server) list(params jsonrpc.Object) (any, *jsonrpc.Error) {
	var after string
	if c := params.String("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || len(b) == 0 {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid cursor")
		}
		after = string(b)
	}
	var page []resource
	next := ""
	listed := 0
	err := s.eachFile(func(p string, d fs.DirEntry) error {
		if listed++; listed > maxListed {
			return fs.SkipAll
		}
		if p <= after {
			return nil
		}
		if len(page) == s.o.PageSize {
			next = base64.RawURLEncoding.EncodeToString([]byte(page[len(page)-1].Name))
			return fs.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		page = append(page, resource{URI: "file:///" + p, Name: p, MIMEType: mimeType(p, nil), Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "list folder: %v", err)
	}
	res := map[string]any{"resources": orEmpty(page)}
	if next != "" {
		res["nextCursor"] = next
	}
	return res, nil
}

// eachFile calls visit with each regular file of the folder that is not
// hidden (nor in a hidden folder), in lexical order; an unreadable entry
// is skipped, not fatal.
func (s *Server) eachFile(visit func(p string, d fs.DirEntry) error) error {
	return fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case p != "." && strings.HasPrefix(d.Name(), "."):
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		case !d.Type().IsRegular():
			return nil
		}
		return visit(p, d)
	})
}

func orEmpty(p []resource) []resource {
	if p == nil {
		return []resource{}
	}
	return p
}

// resolve turns a file:/// URI into a path relative to the folder, refusing
// anything that could name a file outside it or a hidden one.
func resolve(uri string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || u.Host != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", false
	}
	raw := strings.ToLower(u.EscapedPath())
	if strings.Contains(raw, "%2f") || strings.Contains(raw, "%5c") || strings.Contains(raw, "%00") {
		return "", false
	}
	p := u.Path
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\\x00") || path.Clean(p) != p {
		return "", false
	}
	rel := p[1:]
	if rel == "" {
		return "", false
	}
	for _, seg := range strings.Split(rel, "/") {
		if seg == ".." || strings.HasPrefix(seg, ".") {
			return "", false
		}
	}
	return rel, true
}

func (s *Server) read(params jsonrpc.Object) (any, *jsonrpc.Error) {
	uri := params.String("uri")
	notFound := jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "resource not found").WithData(mcp.NotFoundData{URI: uri})
	rel, ok := resolve(uri)
	if !ok {
		return nil, notFound
	}
	f, err := s.root.Open(rel)
	if err != nil {
		return nil, notFound
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return nil, notFound
	}
	if info.Size() > s.o.MaxFileBytes {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "file is larger than %d bytes", s.o.MaxFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, s.o.MaxFileBytes+1))
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "read file: %v", err)
	}
	mt := mimeType(rel, data)
	c := map[string]string{"uri": uri, "mimeType": mt}
	if textual(mt) && utf8.Valid(data) {
		c["text"] = string(data)
	} else {
		c["blob"] = base64.StdEncoding.EncodeToString(data)
	}
	return map[string]any{"contents": []map[string]string{c}}, nil
}

var extraTypes = map[string]string{
	".md": "text/markdown", ".markdown": "text/markdown", ".yaml": "application/yaml", ".yml": "application/yaml",
	".go": "text/x-go", ".toml": "application/toml", ".txt": "text/plain", ".json": "application/json",
}

// mimeType guesses from the extension, then (when data is given) from the
// content.
func mimeType(name string, data []byte) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := extraTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		mt, _, _ := mime.ParseMediaType(t)
		return mt
	}
	if data != nil {
		mt, _, _ := mime.ParseMediaType(http.DetectContentType(data))
		return mt
	}
	return "application/octet-stream"
}

func textual(mt string) bool {
	if strings.HasPrefix(mt, "text/") {
		return true
	}
	switch mt {
	case "application/json", "application/yaml", "application/toml", "application/xml", "application/javascript":
		return true
	}
	return false
}
