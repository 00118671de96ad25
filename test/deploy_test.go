package test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestDeploy checks deploy/ (compose.yaml and kubernetes/) for what `docker
// compose up` or `kubectl apply -k` would only reveal at run time, without a
// container engine or a cluster: every Manifold config in them passes
// `manifold validate`, and ports, probes, mounts, service names and
// environment agree with the configs and with the image the Dockerfile
// builds.
func TestDeploy(t *testing.T) {
	img := readDockerImage(t)
	t.Run("compose", func(t *testing.T) {
		ws, reach := loadCompose(t, img)
		checkDeployWorkloads(t, img, ws, reach)
	})
	t.Run("kubernetes", func(t *testing.T) {
		ws, reach := loadKubernetes(t, img)
		checkDeployWorkloads(t, img, ws, reach)
	})
	t.Run("served", checkOpsPathsServed)
}

// The paths the probes and the Prometheus scrape must use (checkDeployProbes).
const (
	livenessPath  = "/healthz"
	readinessPath = "/readyz"
	metricsPath   = "/metrics"
)

// checkOpsPathsServed asks a real Manifold's admin listener for the paths
// the deploy files are held to: liveness and metrics answer 200, readiness
// 200 or 503 with its JSON body (here its one upstream is down: 503).
func checkOpsPathsServed(t *testing.T) {
	o := startOps(t, "upstreams:"+httpUpstreamYAML("a", fmt.Sprintf("http://127.0.0.1:%d/mcp", freePort(t)), "timeout: 1s"))
	if code, _ := o.get(t, livenessPath); code != http.StatusOK {
		t.Errorf("GET %s on the admin listener: %d", livenessPath, code)
	}
	if code, body := o.get(t, readinessPath); (code != http.StatusOK && code != http.StatusServiceUnavailable) || !strings.Contains(body, `"ready"`) {
		t.Errorf("GET %s on the admin listener: %d %s", readinessPath, code, body)
	}
	if code, body := o.get(t, metricsPath); code != http.StatusOK || !strings.Contains(body, "manifold_upstream_up") {
		t.Errorf("GET %s on the admin listener: %d", metricsPath, code)
	}
}

const deployDir = "../deploy"

// dockerImage is what the checks need of the Dockerfile: the program its
// ENTRYPOINT runs and the config file it reads. Read, not hard-coded, so
// that a change there which the deploy files miss fails here.
type dockerImage struct {
	binary     string
	configPath string
}

func readDockerImage(t *testing.T) dockerImage {
	t.Helper()
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var entry []string
	for _, line := range strings.Split(string(data), "\n") {
		// The last ENTRYPOINT is the final stage's: the one the image runs.
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ENTRYPOINT"); ok {
			entry = nil
			if err := json.Unmarshal([]byte(strings.TrimSpace(rest)), &entry); err != nil {
				t.Fatalf("Dockerfile: ENTRYPOINT is not in exec form (a JSON array): %v", err)
			}
		}
	}
	var img dockerImage
	for i, a := range entry {
		if i == 0 {
			img.binary = a
		} else if a == "--config" && i+1 < len(entry) {
			img.configPath = entry[i+1]
		} else if v, ok := strings.CutPrefix(a, "--config="); ok {
			img.configPath = v
		}
	}
	if img.binary == "" || !path.IsAbs(img.configPath) {
		t.Fatalf("Dockerfile: want ENTRYPOINT [PROGRAM, ..., --config, /ABSOLUTE/PATH], got %q", entry)
	}
	return img
}

// isManifoldImage reports whether a container image is the one the Dockerfile
// builds (manifold, manifold:TAG, REGISTRY/manifold@DIGEST).
func isManifoldImage(ref string) bool {
	name, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	return name == "manifold" || strings.HasSuffix(name, "/manifold")
}

// workload is one container the files define (a compose service, or a
// container of a Kubernetes pod template), reduced to what the checks
// compare.
type workload struct {
	where      string
	image      string
	config     string               // the Manifold config the container reads; "" when none is mounted
	configFrom string               // where config comes from; replicas share it
	env        map[string]string    // the container's variables, values as far as the files tell
	ports      []namedPort          // container ports the file declares
	exposures  []exposure           // how other containers reach it
	mounts     []string             // container paths something is mounted at
	override   string               // what replaces the image's command, if anything
	probes     map[string]httpProbe // Kubernetes probes by kind; nil for compose
	annots     map[string]string    // pod annotations
	problems   []string             // found while loading
}

func (w *workload) problem(format string, args ...any) {
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

type namedPort struct {
	name   string
	number int
}

// exposure is one way to reach a workload: the host names and port a
// client dials, and the container port that lands on (both 0: any port,
// unchanged, as on a compose network).
type exposure struct {
	where         string
	hosts         []string
	port          int
	name          string
	containerPort int
}

type httpProbe struct {
	path string // "" unless an HTTP probe
	port int
}

// reachFunc resolves a host and port as a URL names them to the workloads
// that answer and the container port the connection lands on.
type reachFunc func(host string, port int) (targets []*workload, containerPort int, err error)

// deployConfig is the part of a Manifold config the cross-checks read.
type deployConfig struct {
	Listen       string   `yaml:"listen"`
	AllowedHosts []string `yaml:"allowed_hosts"`
	Admin        struct {
		Listen string `yaml:"listen"`
	} `yaml:"admin"`
	Cache struct {
		Redis struct {
			URL   string   `yaml:"url"`
			Addrs []string `yaml:"addrs"`
		} `yaml:"redis"`
	} `yaml:"cache"`
	Upstreams []struct {
		Name    string   `yaml:"name"`
		URL     string   `yaml:"url"`
		Command []string `yaml:"command"`
	} `yaml:"upstreams"`
}

// manifoldRef is Manifold's own ${VAR} / ${VAR:-default} syntax.
var manifoldRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

func walkYAMLScalars(n *yaml.Node, f func(*yaml.Node)) {
	if n.Kind == yaml.ScalarNode {
		f(n)
	}
	for _, c := range n.Content {
		walkYAMLScalars(c, f)
	}
}

// deployConfigRefs lists the ${VAR} references in a config's values (comments
// may mention ${VAR} freely), each as [ref, name, ":-default", default].
func deployConfigRefs(config string) [][]string {
	var root yaml.Node
	if yaml.Unmarshal([]byte(config), &root) != nil {
		return nil
	}
	var refs [][]string
	walkYAMLScalars(&root, func(n *yaml.Node) {
		refs = append(refs, manifoldRef.FindAllStringSubmatch(n.Value, -1)...)
	})
	return refs
}

// parseDeployConfig decodes w's config with ${VAR} expanded from w's environment.
func parseDeployConfig(w *workload) (*deployConfig, error) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(w.config), &root); err != nil {
		return nil, err
	}
	walkYAMLScalars(&root, func(n *yaml.Node) {
		n.Value = manifoldRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			m := manifoldRef.FindStringSubmatch(ref)
			if v := w.env[m[1]]; v != "" {
				return v
			}
			return m[3]
		})
	})
	var c deployConfig
	if err := root.Decode(&c); err != nil {
		return nil, err
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080" // Manifold's default
	}
	return &c, nil
}

// listenPortOf returns the port of a listen address, and a problem when the
// address cannot be reached from outside the container.
func listenPortOf(key, addr string) (int, string) {
	host, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		return 0, fmt.Sprintf("%s %q is not host:port", key, addr)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		return n, fmt.Sprintf("%s is %q: in a container it must be 0.0.0.0:%d, or nothing outside the container reaches it", key, addr, n)
	}
	return n, ""
}

// hostAdmitted is Manifold's Host check (router/frontend): an entry without
// a port admits the host on any port; loopback needs no entry.
func hostAdmitted(allowed []string, host string, port int) bool {
	if host == "localhost" || host == "::1" || strings.HasPrefix(host, "127.") {
		return true
	}
	for _, a := range allowed {
		ah, ap, err := net.SplitHostPort(a)
		if err != nil {
			ah, ap = a, ""
		}
		if a == "*" || (strings.EqualFold(ah, host) && (ap == "" || ap == strconv.Itoa(port))) {
			return true
		}
	}
	return false
}

func checkDeployWorkloads(t *testing.T, img dockerImage, ws []*workload, reach reachFunc) {
	manifolds := 0
	validated := map[string]bool{}
	for _, w := range ws {
		for _, p := range w.problems {
			t.Errorf("%s: %s", w.where, p)
		}
		if !isManifoldImage(w.image) {
			continue
		}
		manifolds++
		if w.config == "" {
			t.Errorf("%s: no Manifold config mounted at %s, where the image's ENTRYPOINT reads it", w.where, img.configPath)
			continue
		}
		if w.override != "" {
			t.Errorf("%s: %s replaces the image's command, which reads %s; leave it to the ENTRYPOINT", w.where, w.override, img.configPath)
		}
		// Replicas share a config and environment: validate it once.
		if key := w.configFrom + fmt.Sprint(w.env); !validated[key] {
			validated[key] = true
			validateDeployed(t, img, w)
		}
		cfg, err := parseDeployConfig(w)
		if err != nil {
			t.Errorf("%s: config from %s: %v", w.where, w.configFrom, err)
			continue
		}
		checkDeployEnv(t, w)
		mcp, ops := checkDeployPorts(t, w, cfg)
		checkDeployProbes(t, w, ops)
		checkDeployHosts(t, w, cfg, mcp)
		checkDeployCommands(t, img, w, cfg)
		checkDeployUpstreams(t, w, cfg, reach)
		checkDeployRedis(t, w, cfg, reach)
	}
	if manifolds == 0 {
		t.Errorf("no container runs the manifold image")
	}
	checkSharedSecrets(t, ws)
}

// validateDeployed runs `manifold validate` on w's config, in w's
// environment and nothing else, so that the developer's own environment
// cannot make it pass.
func validateDeployed(t *testing.T, img dockerImage, w *workload) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(w.config), &root); err != nil || len(root.Content) == 0 {
		t.Errorf("%s: config from %s is not a YAML document: %v", w.where, w.configFrom, err)
		return
	}
	// validate checks that a stdio upstream's program exists, and the
	// image's path to it does not exist here: run the binary under test
	// instead. The arguments (the `files` folder) stay: validate checks
	// only the program and dir.
	if ups := yamlMapValue(root.Content[0], "upstreams"); ups != nil {
		for _, u := range ups.Content {
			if cmd := yamlMapValue(u, "command"); cmd != nil && len(cmd.Content) > 0 && cmd.Content[0].Value == img.binary {
				cmd.Content[0].Value = manifoldBin
			}
		}
	}
	data, err := yaml.Marshal(&root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(manifoldBin, "validate", "--config", file)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range w.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: manifold validate rejects the config from %s (%v):\n%s", w.where, w.configFrom, err, out)
	}
}

func yamlMapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// checkDeployEnv: a ${VAR} without a default that the container does not get
// stops Manifold at start.
func checkDeployEnv(t *testing.T, w *workload) {
	for _, m := range deployConfigRefs(w.config) {
		if _, ok := w.env[m[1]]; !ok && m[2] == "" {
			t.Errorf("%s: the config from %s references ${%s}, which the container's environment does not provide", w.where, w.configFrom, m[1])
		}
	}
}

// checkDeployPorts: declared and exposed ports land where the config listens:
// "mcp" on listen, "admin" and "metrics" on admin.listen (ops), any other
// on one of the two. It returns both ports.
func checkDeployPorts(t *testing.T, w *workload, cfg *deployConfig) (mcp, ops int) {
	mcp, p := listenPortOf("listen", cfg.Listen)
	if p != "" {
		t.Errorf("%s: %s", w.where, p)
	}
	ops = mcp // without an admin listener, the operational endpoints are on listen
	if cfg.Admin.Listen != "" {
		if ops, p = listenPortOf("admin.listen", cfg.Admin.Listen); p != "" {
			t.Errorf("%s: %s", w.where, p)
		}
	}
	check := func(what, name string, n int) {
		switch {
		case (name == "mcp" || name == "http") && n != mcp:
			t.Errorf("%s: %s %q is %d, but the config listens on %d (listen: %s)", w.where, what, name, n, mcp, cfg.Listen)
		case (name == "admin" || name == "metrics") && n != ops:
			t.Errorf("%s: %s %q is %d, but the admin endpoints are on %d (admin.listen: %q)", w.where, what, name, n, ops, cfg.Admin.Listen)
		case n != mcp && n != ops:
			t.Errorf("%s: %s %q is %d, where nothing listens (listen %d, admin %d)", w.where, what, name, n, mcp, ops)
		}
	}
	for _, p := range w.ports {
		check("container port", p.name, p.number)
	}
	for _, e := range w.exposures {
		if e.containerPort != 0 {
			check(e.where+" targets port", e.name, e.containerPort)
		}
	}
	return mcp, ops
}

// checkDeployProbes: liveness is /healthz and readiness /readyz, both on the
// admin listener (ops), as is the Prometheus scrape.
func checkDeployProbes(t *testing.T, w *workload, ops int) {
	if w.probes != nil {
		for kind, want := range map[string]string{"liveness": livenessPath, "readiness": readinessPath} {
			if pr, ok := w.probes[kind]; !ok {
				t.Errorf("%s: no %s probe", w.where, kind)
			} else if pr.path != want || pr.port != ops {
				t.Errorf("%s: %s probe is GET %q on port %d; want GET %s on the admin port %d", w.where, kind, pr.path, pr.port, want, ops)
			}
		}
		if pr, ok := w.probes["startup"]; ok && (pr.port != ops || (pr.path != livenessPath && pr.path != readinessPath)) {
			t.Errorf("%s: startup probe is GET %q on port %d; want /healthz or /readyz on the admin port %d", w.where, pr.path, pr.port, ops)
		}
	}
	if w.annots["prometheus.io/scrape"] == "true" {
		if got := w.annots["prometheus.io/port"]; got != strconv.Itoa(ops) {
			t.Errorf("%s: prometheus.io/port is %q; /metrics is on the admin port %d", w.where, got, ops)
		}
		if got, ok := w.annots["prometheus.io/path"]; ok && got != metricsPath {
			t.Errorf("%s: prometheus.io/path is %q, not /metrics", w.where, got)
		}
	}
}

// checkDeployHosts: clients send the name they dialled as Host, and Manifold
// answers 403 to one allowed_hosts does not admit.
func checkDeployHosts(t *testing.T, w *workload, cfg *deployConfig, mcp int) {
	for _, e := range w.exposures {
		if e.containerPort != 0 && e.containerPort != mcp {
			continue
		}
		port := e.port
		if port == 0 {
			port = mcp
		}
		for _, h := range e.hosts {
			if !hostAdmitted(cfg.AllowedHosts, h, port) {
				t.Errorf("%s: clients reach it as %s:%d (%s), which allowed_hosts %q does not admit", w.where, h, port, e.where, cfg.AllowedHosts)
			}
		}
	}
}

// checkDeployCommands: the image is distroless and holds one program, so a stdio
// upstream can only run it; the folder `files` serves must be mounted, or
// it serves nothing.
func checkDeployCommands(t *testing.T, img dockerImage, w *workload, cfg *deployConfig) {
	for _, u := range cfg.Upstreams {
		switch {
		case len(u.Command) == 0:
		case u.Command[0] != img.binary:
			t.Errorf("%s: upstream %s runs %q, but the image holds only %s", w.where, u.Name, u.Command[0], img.binary)
		case len(u.Command) > 2 && u.Command[1] == "files":
			dir := path.Clean(u.Command[len(u.Command)-1])
			if !slices.ContainsFunc(w.mounts, func(m string) bool { return m == dir || strings.HasPrefix(m, dir+"/") }) {
				t.Errorf("%s: upstream %s serves %s, but nothing is mounted there (mounts: %q)", w.where, u.Name, dir, w.mounts)
			}
		}
	}
}

// checkDeployUpstreams: an upstream URL names a service these files define, on a
// port that lands where it listens, at /mcp, with a Host it admits.
func checkDeployUpstreams(t *testing.T, w *workload, cfg *deployConfig, reach reachFunc) {
	for _, u := range cfg.Upstreams {
		if u.URL == "" {
			continue
		}
		pu, err := url.Parse(u.URL)
		if err != nil || pu.Hostname() == "" {
			t.Errorf("%s: upstream %s: bad url %q", w.where, u.Name, u.URL)
			continue
		}
		port := urlPort(pu)
		targets, cport, err := reach(pu.Hostname(), port)
		if err != nil {
			t.Errorf("%s: upstream %s (%s): %v", w.where, u.Name, u.URL, err)
		}
		for _, tw := range targets {
			tc, err := parseDeployConfig(tw)
			if !isManifoldImage(tw.image) || err != nil {
				checkDeclaredPort(t, w, "upstream "+u.Name, tw, cport)
				continue
			}
			if tp, _ := listenPortOf("listen", tc.Listen); tp != cport {
				t.Errorf("%s: upstream %s (%s) lands on port %d of %s, which listens on %d", w.where, u.Name, u.URL, cport, tw.where, tp)
			}
			if pu.Path != "/mcp" {
				t.Errorf("%s: upstream %s (%s): Manifold serves MCP at /mcp, not %q", w.where, u.Name, u.URL, pu.Path)
			}
			if !hostAdmitted(tc.AllowedHosts, pu.Hostname(), port) {
				t.Errorf("%s: upstream %s sends Host %s, which %s does not admit (allowed_hosts %q)", w.where, u.Name, pu.Host, tw.where, tc.AllowedHosts)
			}
		}
	}
}

// checkDeployRedis: the Redis address names a service these files define, which
// declares the port.
func checkDeployRedis(t *testing.T, w *workload, cfg *deployConfig, reach reachFunc) {
	addrs := slices.Clone(cfg.Cache.Redis.Addrs)
	if r := cfg.Cache.Redis.URL; r != "" {
		if pu, err := url.Parse(r); err != nil {
			t.Errorf("%s: cache.redis.url %q: %v", w.where, r, err)
		} else if pu.Scheme != "unix" {
			addrs = append(addrs, net.JoinHostPort(pu.Hostname(), strconv.Itoa(urlPort(pu))))
		}
	}
	for _, a := range addrs {
		host, p, err := net.SplitHostPort(a)
		port, _ := strconv.Atoi(p)
		targets, cport, err2 := reach(host, port)
		if err = errors.Join(err, err2); err != nil {
			t.Errorf("%s: redis %s: %v", w.where, a, err)
		}
		for _, tw := range targets {
			checkDeclaredPort(t, w, "redis "+a, tw, cport)
		}
	}
}

func urlPort(u *url.URL) int {
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	switch u.Scheme {
	case "https":
		return 443
	case "redis", "rediss":
		return 6379
	}
	return 80
}

// checkDeclaredPort: of a target whose config is unknown here, the port
// traffic lands on must at least be declared.
func checkDeclaredPort(t *testing.T, w *workload, what string, tw *workload, port int) {
	if !slices.ContainsFunc(tw.ports, func(p namedPort) bool { return p.number == port }) {
		t.Errorf("%s: %s lands on port %d of %s, which declares no such port", w.where, what, port, tw.where)
	}
}

// checkSharedSecrets: replicas of one config must agree on what it
// references, or they refuse each other's cursors and cannot share private
// cache entries.
func checkSharedSecrets(t *testing.T, ws []*workload) {
	first := map[string]*workload{}
	for _, w := range ws {
		if !isManifoldImage(w.image) || w.config == "" {
			continue
		}
		f, ok := first[w.configFrom]
		if !ok {
			first[w.configFrom] = w
			continue
		}
		for _, m := range deployConfigRefs(w.config) {
			if f.env[m[1]] != w.env[m[1]] {
				t.Errorf("%s and %s share the config from %s but not ${%s}", f.where, w.where, w.configFrom, m[1])
			}
		}
	}
}

// readYAMLDocuments decodes every document of a (multi-document) YAML file.
func readYAMLDocuments(t *testing.T, file string) []*yaml.Node {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var docs []*yaml.Node
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			return docs
		} else if err != nil {
			t.Fatalf("%s: not valid YAML: %v", file, err)
		}
		if len(n.Content) > 0 && n.Content[0].Tag != "!!null" { // not an empty "---"
			docs = append(docs, &n)
		}
	}
}

// ---- compose

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Configs  map[string]struct {
		Content *string `yaml:"content"`
		File    string  `yaml:"file"`
	} `yaml:"configs"`
}

type composeService struct {
	Image       string                  `yaml:"image"`
	Command     any                     `yaml:"command"`
	Entrypoint  any                     `yaml:"entrypoint"`
	Healthcheck *struct{ Disable bool } `yaml:"healthcheck"`
	Environment composeEnv              `yaml:"environment"`
	Ports       []composePort           `yaml:"ports"`
	Expose      []string                `yaml:"expose"`
	Configs     []composeConfigRef      `yaml:"configs"`
	Volumes     []composeVolume         `yaml:"volumes"`
	DependsOn   composeNames            `yaml:"depends_on"`
	Networks    composeNetworks         `yaml:"networks"`
}

// composeEnv is `environment`, a mapping or a list of KEY=VALUE; a nil
// value is passed through from where compose runs.
type composeEnv map[string]*string

func (e *composeEnv) UnmarshalYAML(n *yaml.Node) error {
	*e = composeEnv{}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if v := n.Content[i+1]; v.Tag != "!!null" {
				(*e)[n.Content[i].Value] = &v.Value
			} else {
				(*e)[n.Content[i].Value] = nil
			}
		}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}
	for _, kv := range list {
		if k, v, ok := strings.Cut(kv, "="); ok {
			(*e)[k] = &v
		} else {
			(*e)[k] = nil
		}
	}
	return nil
}

// composePort is a `ports` entry, short ([IP:][HOST:]CONTAINER[/PROTO]) or
// long.
type composePort struct {
	Name   string `yaml:"name"`
	Target int    `yaml:"target"`
}

func (p *composePort) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		type plain composePort
		return n.Decode((*plain)(p))
	}
	s, _, _ := strings.Cut(n.Value, "/")
	target, err := strconv.Atoi(s[strings.LastIndex(s, ":")+1:])
	if err != nil {
		return fmt.Errorf("port %q: the container port is not one number", n.Value)
	}
	p.Target = target
	return nil
}

type composeConfigRef struct {
	Source string `yaml:"source"`
	Target string `yaml:"target"`
}

func (c *composeConfigRef) UnmarshalYAML(n *yaml.Node) error {
	type plain composeConfigRef
	if n.Kind == yaml.ScalarNode {
		c.Source = n.Value
	} else if err := n.Decode((*plain)(c)); err != nil {
		return err
	}
	if c.Target == "" {
		c.Target = "/" + c.Source // compose's default
	}
	return nil
}

type composeVolume struct {
	Type   string `yaml:"type"`
	Source string `yaml:"source"`
	Target string `yaml:"target"`
}

func (v *composeVolume) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		type plain composeVolume
		return n.Decode((*plain)(v))
	}
	parts := strings.Split(n.Value, ":")
	v.Type, v.Target = "volume", parts[0]
	if len(parts) > 1 {
		v.Source, v.Target = parts[0], parts[1]
		if strings.ContainsAny(v.Source[:1], "./~") {
			v.Type = "bind"
		}
	}
	return nil
}

// composeNames is a list of names or a mapping keyed by them.
type composeNames []string

func (c *composeNames) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return n.Decode((*[]string)(c))
	}
	for i := 0; i < len(n.Content); i += 2 {
		*c = append(*c, n.Content[i].Value)
	}
	return nil
}

// composeNetworks collects a service's network aliases.
type composeNetworks struct{ aliases []string }

func (c *composeNetworks) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return nil // a list of networks: no aliases
	}
	for i := 1; i < len(n.Content); i += 2 {
		var nw struct {
			Aliases []string `yaml:"aliases"`
		}
		if n.Content[i].Tag != "!!null" {
			if err := n.Content[i].Decode(&nw); err != nil {
				return err
			}
		}
		c.aliases = append(c.aliases, nw.Aliases...)
	}
	return nil
}

// composeRef is what compose interpolates: $$ (a literal $), ${VAR...}
// with its modifiers, and a bare $VAR.
var composeRef = regexp.MustCompile(`\$(\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))`)

// composeInterpolate does to a value what compose does when it loads the
// file, as if nothing were set where it runs, so that the result does not
// depend on who runs the test: a default applies, a required variable (?)
// gets a stand-in, and one with neither is a problem (compose passes "").
// substituted lists what compose itself replaced.
func composeInterpolate(s string) (out string, substituted, problems []string) {
	out = composeRef.ReplaceAllStringFunc(s, func(ref string) string {
		m := composeRef.FindStringSubmatch(ref)
		if m[1] == "$" {
			return "$"
		}
		substituted = append(substituted, ref)
		switch strings.TrimPrefix(m[3], ":") {
		case "-":
			return m[4]
		case "?":
			return "set-where-compose-runs-0123456789"
		case "+":
			return ""
		}
		problems = append(problems, fmt.Sprintf("%s has no default: unless it is set where compose runs, it is empty", m[2]+m[5]))
		return ""
	})
	return out, substituted, problems
}

func loadCompose(t *testing.T, img dockerImage) ([]*workload, reachFunc) {
	t.Helper()
	file := filepath.Join(deployDir, "compose.yaml")
	docs := readYAMLDocuments(t, file)
	if len(docs) != 1 {
		t.Fatalf("%s: %d YAML documents, want 1", file, len(docs))
	}
	var cf composeFile
	if err := docs[0].Decode(&cf); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var ws []*workload
	byHost := map[string][]*workload{}
	for _, name := range slices.Sorted(maps.Keys(cf.Services)) {
		w := composeWorkload(img, &cf, name)
		ws = append(ws, w)
		for _, h := range w.exposures[0].hosts {
			byHost[h] = append(byHost[h], w)
		}
	}
	if len(ws) == 0 {
		t.Fatalf("%s: no services", file)
	}
	// On a compose network, a name reaches the container port it is given.
	reach := func(host string, port int) ([]*workload, int, error) {
		if ws := byHost[host]; len(ws) > 0 {
			return ws, port, nil
		}
		return nil, 0, fmt.Errorf("no service or network alias %q in %s", host, file)
	}
	return ws, reach
}

func composeWorkload(img dockerImage, cf *composeFile, name string) *workload {
	svc := cf.Services[name]
	w := &workload{where: "compose service " + name, env: map[string]string{}}
	interp := func(what, s string) string {
		out, _, problems := composeInterpolate(s)
		for _, p := range problems {
			w.problem("%s: %s", what, p)
		}
		return out
	}
	w.image = interp("image", svc.Image)
	for k, v := range svc.Environment {
		w.env[k] = "passed-through-from-where-compose-runs"
		if v != nil {
			w.env[k] = interp("environment "+k, *v)
		}
	}
	for _, p := range svc.Ports {
		w.ports = append(w.ports, namedPort{p.Name, p.Target})
	}
	for _, e := range svc.Expose {
		n, err := strconv.Atoi(strings.Split(e, "/")[0])
		if err != nil {
			w.problem("expose %q is not a port", e)
		}
		w.ports = append(w.ports, namedPort{"", n})
	}
	for _, d := range svc.DependsOn {
		if _, ok := cf.Services[d]; !ok {
			w.problem("depends_on %q, which is not a service", d)
		}
	}
	if svc.Entrypoint != nil {
		w.override = "entrypoint"
	} else if svc.Command != nil {
		w.override = "command"
	}
	if isManifoldImage(w.image) && svc.Healthcheck != nil && !svc.Healthcheck.Disable {
		w.problem("has a healthcheck, but the image is distroless: no shell or curl for it to run")
	}
	composeMounts(img, cf, svc, w)
	w.exposures = []exposure{{where: "the compose network", hosts: append([]string{name}, svc.Networks.aliases...)}}
	return w
}

// composeMounts records what svc mounts, and the config at img.configPath:
// a compose config, a file, or a folder holding it.
func composeMounts(img dockerImage, cf *composeFile, svc composeService, w *workload) {
	for _, c := range svc.Configs {
		w.mounts = append(w.mounts, c.Target)
		def, ok := cf.Configs[c.Source]
		switch {
		case c.Target != img.configPath:
		case !ok:
			w.problem("config %q is not defined under configs:", c.Source)
		case def.Content != nil:
			out, substituted, _ := composeInterpolate(*def.Content)
			for _, ref := range substituted {
				w.problem("config %q: compose substitutes %s itself when it loads the file; write $%s so that Manifold expands it from the container's environment", c.Source, ref, ref)
			}
			w.config, w.configFrom = out, "compose config "+c.Source
		default:
			w.config, w.configFrom = readDeployFile(w, def.File), def.File
		}
	}
	for _, v := range svc.Volumes {
		w.mounts = append(w.mounts, v.Target)
		if v.Type == "bind" && v.Target == img.configPath {
			w.config, w.configFrom = readDeployFile(w, v.Source), v.Source
		} else if v.Type == "bind" && v.Target == path.Dir(img.configPath) {
			src := path.Join(v.Source, path.Base(img.configPath))
			w.config, w.configFrom = readDeployFile(w, src), src
		}
	}
}

// readDeployFile reads a file compose names, relative to compose.yaml.
func readDeployFile(w *workload, name string) string {
	data, err := os.ReadFile(filepath.Join(deployDir, filepath.FromSlash(name)))
	if err != nil {
		w.problem("config file: %v", err)
	}
	return string(data)
}

// ---- Kubernetes

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Resources  []string          `yaml:"resources"` // a Kustomization's
	Spec       yaml.Node         `yaml:"spec"`
	file       string
}

type k8sPodTemplate struct {
	Metadata struct {
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec struct {
		SecurityContext struct {
			RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		} `yaml:"securityContext"`
		Containers []k8sContainer `yaml:"containers"`
		Volumes    []k8sVolume    `yaml:"volumes"`
	} `yaml:"spec"`
}

type k8sVolume struct {
	Name      string `yaml:"name"`
	ConfigMap *struct {
		Name  string `yaml:"name"`
		Items []struct {
			Key  string `yaml:"key"`
			Path string `yaml:"path"`
		} `yaml:"items"`
	} `yaml:"configMap"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef    *k8sRef `yaml:"secretKeyRef"`
			ConfigMapKeyRef *k8sRef `yaml:"configMapKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		SecretRef    *k8sRef `yaml:"secretRef"`
		ConfigMapRef *k8sRef `yaml:"configMapRef"`
	} `yaml:"envFrom"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
	LivenessProbe   *k8sProbe `yaml:"livenessProbe"`
	ReadinessProbe  *k8sProbe `yaml:"readinessProbe"`
	StartupProbe    *k8sProbe `yaml:"startupProbe"`
	SecurityContext struct {
		RunAsNonRoot           *bool `yaml:"runAsNonRoot"`
		ReadOnlyRootFilesystem *bool `yaml:"readOnlyRootFilesystem"`
	} `yaml:"securityContext"`
}

type k8sRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"` // a number or a port name
	} `yaml:"httpGet"`
}

type k8sService struct {
	Selector map[string]string `yaml:"selector"`
	Ports    []struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort string `yaml:"targetPort"` // a number or a port name
	} `yaml:"ports"`
	pod *k8sPod
}

// k8sPod is a Deployment's (or StatefulSet's) pod template.
type k8sPod struct {
	name       string
	labels     map[string]string
	containers []*workload
}

// k8sSet is what deploy/kubernetes defines.
type k8sSet struct {
	dir       string
	ns        string
	data      map[string]map[string]map[string]string // kind (Secret, ConfigMap) → name → key → value
	pods      []*k8sPod
	services  map[string]*k8sService
	workloads []*workload
}

func loadKubernetes(t *testing.T, img dockerImage) ([]*workload, reachFunc) {
	t.Helper()
	s := &k8sSet{dir: filepath.Join(deployDir, "kubernetes"), services: map[string]*k8sService{},
		data: map[string]map[string]map[string]string{"Secret": {}, "ConfigMap": {}}}
	objs := s.read(t)
	for _, o := range objs {
		switch o.Kind {
		case "Secret":
			s.data["Secret"][o.Metadata.Name] = maps.Clone(o.StringData)
			for k, v := range o.Data {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					t.Errorf("%s: Secret %s: data.%s is not base64", o.file, o.Metadata.Name, k)
				}
				s.data["Secret"][o.Metadata.Name][k] = string(b)
			}
		case "ConfigMap":
			s.data["ConfigMap"][o.Metadata.Name] = o.Data
		}
	}
	for _, o := range objs {
		if o.Kind == "Deployment" || o.Kind == "StatefulSet" {
			s.loadPod(t, img, o)
		}
	}
	for _, o := range objs {
		if o.Kind == "Service" {
			s.loadService(t, o)
		}
	}
	return s.workloads, s.reach
}

// read decodes every object, and checks the kustomization and the
// namespace: one for all, since the configs name services by their
// in-namespace DNS names.
func (s *k8sSet) read(t *testing.T) []*k8sObject {
	files, err := filepath.Glob(filepath.Join(s.dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no YAML files (%v)", s.dir, err)
	}
	var objs []*k8sObject
	namespaces := map[string]bool{}
	for _, f := range files {
		for _, doc := range readYAMLDocuments(t, f) {
			o := &k8sObject{file: filepath.Base(f)}
			if err := doc.Decode(o); err != nil || o.Kind == "" {
				t.Fatalf("%s: a document that is not an object (%v)", f, err)
			}
			switch {
			case o.Kind == "Kustomization":
				checkKustomization(t, o, files)
				continue
			case o.Kind == "Namespace":
				namespaces[o.Metadata.Name] = true
			case o.Metadata.Namespace == "":
				t.Errorf("%s: %s %s has no metadata.namespace", o.file, o.Kind, o.Metadata.Name)
			case s.ns == "":
				s.ns = o.Metadata.Namespace
			case o.Metadata.Namespace != s.ns:
				t.Errorf("%s: %s %s is in namespace %q, the others in %q", o.file, o.Kind, o.Metadata.Name, o.Metadata.Namespace, s.ns)
			}
			objs = append(objs, o)
		}
	}
	if len(namespaces) > 0 && !namespaces[s.ns] {
		t.Errorf("the objects are in namespace %q, but the Namespaces defined are %q", s.ns, slices.Sorted(maps.Keys(namespaces)))
	}
	return objs
}

// checkKustomization: `kubectl apply -k` applies what the kustomization
// lists, so a file it leaves out is silently not deployed.
func checkKustomization(t *testing.T, k *k8sObject, files []string) {
	for _, r := range k.Resources {
		if !slices.ContainsFunc(files, func(f string) bool { return filepath.Base(f) == r }) {
			t.Errorf("%s lists %s, which is not in the folder", k.file, r)
		}
	}
	for _, f := range files {
		if base := filepath.Base(f); base != k.file && !slices.Contains(k.Resources, base) {
			t.Errorf("%s does not list %s, so kubectl apply -k leaves it out", k.file, base)
		}
	}
}

func (s *k8sSet) loadPod(t *testing.T, img dockerImage, o *k8sObject) {
	var spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template k8sPodTemplate `yaml:"template"`
	}
	if err := o.Spec.Decode(&spec); err != nil {
		t.Errorf("%s: %s %s: %v", o.file, o.Kind, o.Metadata.Name, err)
		return
	}
	p := &k8sPod{name: o.Kind + " " + o.Metadata.Name, labels: spec.Template.Metadata.Labels}
	if len(spec.Selector.MatchLabels) == 0 || !k8sLabelsMatch(spec.Selector.MatchLabels, p.labels) {
		t.Errorf("%s: %s: selector %v does not match the pod template's labels %v", o.file, p.name, spec.Selector.MatchLabels, p.labels)
	}
	for _, c := range spec.Template.Spec.Containers {
		w := &workload{
			where:  fmt.Sprintf("%s: %s container %s", o.file, p.name, c.Name),
			image:  c.Image,
			env:    map[string]string{},
			annots: spec.Template.Metadata.Annotations,
			probes: map[string]httpProbe{},
		}
		for _, cp := range c.Ports {
			w.ports = append(w.ports, namedPort{cp.Name, cp.ContainerPort})
		}
		if len(c.Command) > 0 || len(c.Args) > 0 {
			w.override = "command/args"
		}
		for kind, pr := range map[string]*k8sProbe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			if pr != nil && pr.HTTPGet != nil {
				w.probes[kind] = httpProbe{pr.HTTPGet.Path, k8sPortNumber(w, pr.HTTPGet.Port)}
			} else if pr != nil {
				w.probes[kind] = httpProbe{}
			}
		}
		s.containerEnv(w, c)
		s.containerConfig(img, w, c, &spec.Template)
		if isManifoldImage(c.Image) {
			checkK8sHardening(w, c, &spec.Template)
		}
		p.containers = append(p.containers, w)
		s.workloads = append(s.workloads, w)
	}
	s.pods = append(s.pods, p)
}

// containerEnv resolves a container's variables from the Secrets and
// ConfigMaps these files define.
func (s *k8sSet) containerEnv(w *workload, c k8sContainer) {
	lookup := func(kind string, ref *k8sRef) (map[string]string, bool) {
		vals, ok := s.data[kind][ref.Name]
		if !ok {
			w.problem("refers to %s %q, which these files do not define", kind, ref.Name)
		}
		return vals, ok
	}
	for _, ef := range c.EnvFrom {
		for kind, ref := range map[string]*k8sRef{"Secret": ef.SecretRef, "ConfigMap": ef.ConfigMapRef} {
			if ref == nil {
				continue
			}
			if vals, ok := lookup(kind, ref); ok {
				maps.Copy(w.env, vals)
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			w.env[e.Name] = e.Value
			continue
		}
		kind, ref := "Secret", e.ValueFrom.SecretKeyRef
		if ref == nil {
			kind, ref = "ConfigMap", e.ValueFrom.ConfigMapKeyRef
		}
		if ref == nil {
			w.env[e.Name] = "from-the-downward-api"
		} else if vals, ok := lookup(kind, ref); ok {
			if v, ok := vals[ref.Key]; ok {
				w.env[e.Name] = v
			} else {
				w.problem("%s: %s %s has no key %q", e.Name, kind, ref.Name, ref.Key)
			}
		}
	}
}

// containerConfig records a container's mounts, and the config it finds at
// img.configPath: a ConfigMap key, mounted as part of the folder or alone
// (subPath).
func (s *k8sSet) containerConfig(img dockerImage, w *workload, c k8sContainer, tmpl *k8sPodTemplate) {
	for _, m := range c.VolumeMounts {
		w.mounts = append(w.mounts, m.MountPath)
		file := m.SubPath
		if m.MountPath == path.Dir(img.configPath) && m.SubPath == "" {
			file = path.Base(img.configPath)
		} else if m.MountPath != img.configPath || m.SubPath == "" {
			continue
		}
		i := slices.IndexFunc(tmpl.Spec.Volumes, func(v k8sVolume) bool { return v.Name == m.Name })
		if i < 0 || tmpl.Spec.Volumes[i].ConfigMap == nil {
			w.problem("volume %q mounted at %s is not a ConfigMap the pod defines", m.Name, m.MountPath)
			continue
		}
		cm := tmpl.Spec.Volumes[i].ConfigMap
		key := file
		if len(cm.Items) > 0 { // items map keys to file names, and leave out the rest
			key = ""
			for _, it := range cm.Items {
				if it.Path == file {
					key = it.Key
				}
			}
		}
		if cfg, ok := s.data["ConfigMap"][cm.Name][key]; ok && key != "" {
			w.config, w.configFrom = cfg, fmt.Sprintf("ConfigMap %s key %s", cm.Name, key)
		} else {
			w.problem("ConfigMap %q mounted at %s has no key for %s", cm.Name, m.MountPath, img.configPath)
		}
	}
}

// checkK8sHardening: the image runs as nonroot and writes nothing; say so,
// so that the cluster refuses a change that would run it otherwise.
func checkK8sHardening(w *workload, c k8sContainer, tmpl *k8sPodTemplate) {
	nonRoot := c.SecurityContext.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = tmpl.Spec.SecurityContext.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		w.problem("runAsNonRoot is not true")
	}
	if ro := c.SecurityContext.ReadOnlyRootFilesystem; ro == nil || !*ro {
		w.problem("readOnlyRootFilesystem is not true")
	}
}

// loadService records how a Service's ports reach the one pod it selects.
func (s *k8sSet) loadService(t *testing.T, o *k8sObject) {
	svc := &k8sService{}
	if err := o.Spec.Decode(svc); err != nil {
		t.Errorf("%s: Service %s: %v", o.file, o.Metadata.Name, err)
		return
	}
	s.services[o.Metadata.Name] = svc
	var matched []*k8sPod
	for _, p := range s.pods {
		if len(svc.Selector) > 0 && k8sLabelsMatch(svc.Selector, p.labels) {
			matched = append(matched, p)
		}
	}
	if len(matched) != 1 {
		t.Errorf("%s: Service %s selects %d workloads (selector %v); want one", o.file, o.Metadata.Name, len(matched), svc.Selector)
		return
	}
	svc.pod = matched[0]
	name := o.Metadata.Name
	for _, sp := range svc.Ports {
		w, n, err := svc.pod.resolve(sp.TargetPort, sp.Port)
		if err != nil {
			t.Errorf("%s: Service %s port %d: %v", o.file, name, sp.Port, err)
			continue
		}
		w.exposures = append(w.exposures, exposure{
			where: fmt.Sprintf("Service %s port %d", name, sp.Port),
			hosts: []string{name, name + "." + s.ns + ".svc", name + "." + s.ns + ".svc.cluster.local"},
			port:  sp.Port, name: sp.Name, containerPort: n,
		})
	}
}

// reach: a Service is NAME, NAME.NS, NAME.NS.svc or NAME.NS.svc.cluster.local,
// on one of its ports.
func (s *k8sSet) reach(host string, port int) ([]*workload, int, error) {
	name, rest, _ := strings.Cut(host, ".")
	if rest != "" && rest != s.ns && rest != s.ns+".svc" && rest != s.ns+".svc.cluster.local" {
		return nil, 0, fmt.Errorf("%q is not a Service name in namespace %q", host, s.ns)
	}
	svc, ok := s.services[name]
	if !ok || svc.pod == nil {
		return nil, 0, fmt.Errorf("no Service %q that selects a workload in %s", name, s.dir)
	}
	for _, sp := range svc.Ports {
		if sp.Port == port {
			w, n, err := svc.pod.resolve(sp.TargetPort, sp.Port)
			if err != nil {
				return nil, 0, err
			}
			return []*workload{w}, n, nil
		}
	}
	return nil, 0, fmt.Errorf("Service %s has no port %d", name, port)
}

// resolve finds the container, and port, a Service's targetPort lands on.
func (p *k8sPod) resolve(target string, port int) (*workload, int, error) {
	if target == "" {
		target = strconv.Itoa(port)
	}
	for _, w := range p.containers {
		for _, cp := range w.ports {
			if cp.name == target || strconv.Itoa(cp.number) == target {
				return w, cp.number, nil
			}
		}
	}
	if n, err := strconv.Atoi(target); err == nil && len(p.containers) == 1 {
		return p.containers[0], n, nil // undeclared: the port checks judge it
	}
	return nil, 0, fmt.Errorf("targetPort %q is no container port of %s", target, p.name)
}

// k8sPortNumber resolves a probe's port, a number or a port name.
func k8sPortNumber(w *workload, port string) int {
	for _, cp := range w.ports {
		if cp.name == port {
			return cp.number
		}
	}
	n, _ := strconv.Atoi(port)
	return n
}

func k8sLabelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
