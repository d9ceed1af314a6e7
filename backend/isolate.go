package backend

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"provideragent/internal/mkdirs"
)

// A workload's command comes from a lease grant, that is from someone
// else: it must not reach the provider's key file, its database or its
// other workloads. So each workload runs as an unprivileged user that is
// not the agent's (a uid of its own from a configured range, or one
// configured user), with a clean environment and a directory of its own,
// under the containment of the agent's workloads (PID namespace, cgroup):
//
//	<workload dir>/                 0711 root   (backend.workload_dir)
//	  <backend marker>/             0711 root
//	    <workload name>/            0711 root
//	      home/                     0700 uid    working directory and HOME
//	      checkpoint/               0711 root
//	        <epoch>/                0700 uid    PROVIDER_AGENT_CHECKPOINT_DIR
//
// Every directory the agent walks through is root's, so a workload cannot
// plant a symbolic link where the agent creates or chowns something; it
// owns only the leaves. The owner of home/ records which uid the workload
// has, across restarts: a workload keeps its uid (and so its files), and
// no two workloads of one backend share one. The workload directory must
// be reachable (searchable by others) from the root: the data dir, which
// is private, cannot hold it.

// IsolationMode says whether a backend runs each workload as a user of
// its own.
type IsolationMode string

const (
	// IsolateUser runs each workload as an unprivileged user that is not
	// the agent's (WorkloadUser, or a uid of its own from WorkloadUIDs),
	// with a clean environment and a private directory; the agent must be
	// root. Where it cannot isolate, the backend says so and starts
	// nothing (ErrNotIsolated). The default.
	IsolateUser IsolationMode = "user"
	// IsolateNone runs workloads as the agent's user, with its
	// environment: any workload can read the agent's key file and
	// database. Unsafe for workloads of third parties.
	IsolateNone IsolationMode = "none"
)

// IsolationModes lists the modes, for help texts and validation.
var IsolationModes = []IsolationMode{IsolateUser, IsolateNone}

// Validate checks m ("" counts as user).
func (m IsolationMode) Validate() error {
	switch m {
	case "", IsolateUser, IsolateNone:
		return nil
	}
	return fmt.Errorf("backend: isolation = %q: want user or none", string(m))
}

// ErrNotIsolated means a workload was not started because the backend
// cannot isolate it on this host (the error says why) and isolation is
// not turned off.
var ErrNotIsolated = errors.New("workload isolation not available")

// UIDRange is an inclusive range of uids; each workload runs as one of
// them, with the gid of the same number.
type UIDRange struct{ First, Last uint32 }

// DefaultWorkloadUIDs is the default range: 65,536 ids no distribution
// hands out.
var DefaultWorkloadUIDs = UIDRange{First: 1900000000, Last: 1900065535}

// ParseUIDRange parses "FIRST-LAST" (inclusive).
func ParseUIDRange(s string) (UIDRange, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return UIDRange{}, fmt.Errorf("%q: want FIRST-LAST, e.g. %s", s, DefaultWorkloadUIDs)
	}
	r := UIDRange{First: uint32(first), Last: uint32(last)}
	return r, r.Validate()
}

// Validate checks that the range is not empty and holds no system id.
func (r UIDRange) Validate() error {
	if r.First > r.Last {
		return fmt.Errorf("uid range %s is empty", r)
	}
	if r.First < 1000 || r.Last >= 1<<31-1 {
		return fmt.Errorf("uid range %s: want ids from 1000 to 2147483646 (no system id, no -1)", r)
	}
	return nil
}

func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Isolation is how a backend isolates its workloads, resolved on this host.
type Isolation struct {
	// Mode is the configured mode.
	Mode IsolationMode `json:"mode"`
	// Active: workloads run as users that are not the agent's.
	Active bool `json:"active"`
	// Users says which users they run as ("uids 1900000000-1900065535, one
	// per workload", "user nobody (uid 65534)"; the agent's when not Active).
	Users string `json:"users"`
	// WorkloadDir holds the workloads' directories.
	WorkloadDir string `json:"workload_dir"`
	// Warning says what a workload can reach, or that nothing starts; ""
	// when workloads are isolated.
	Warning string `json:"warning,omitempty"`
	// Summary is String's text.
	Summary string `json:"summary"`

	refuse error // why Start refuses (ErrNotIsolated); nil when it runs workloads
}

// String describes the isolation for logs and /status.
func (i *Isolation) String() string {
	if i == nil {
		return "none"
	}
	if i.Active {
		return "workloads run as " + i.Users + ", directories under " + i.WorkloadDir
	}
	if i.refuse != nil {
		return "not available: no workload starts"
	}
	return "none: workloads run as the agent's user"
}

// isolationConfig is what detectIsolation needs of a ProcessConfig.
type isolationConfig struct {
	mode  IsolationMode
	user  string
	uids  UIDRange
	dir   string // the workload dir ("" for a temporary one)
	label string // names this backend's directory in dir (the marker)
}

// defaultPath is the environment's PATH of an isolated workload.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// detectIsolation resolves cfg on this host and prepares the backend's
// workload directories. A configuration error (an unknown user, the
// agent's own user, an unreachable workload dir) is an error; a host that
// cannot isolate (the agent is not root, or may not change its uid) is a
// warning, and workloads are refused.
func detectIsolation(cfg isolationConfig) (*Isolation, *workdirs, error) {
	if cfg.mode == "" {
		cfg.mode = IsolateUser
	}
	iso := &Isolation{Mode: cfg.mode}
	w := &workdirs{uids: cfg.uids, byName: map[string]uint32{}, used: map[uint32]string{}}
	if w.uids == (UIDRange{}) {
		w.uids = DefaultWorkloadUIDs
	}
	if cfg.mode == IsolateUser {
		if err := w.uids.Validate(); err != nil {
			return nil, nil, fmt.Errorf("backend: workload_uids: %w", err)
		}
		if cfg.user != "" {
			uid, gid, name, err := lookupUser(cfg.user)
			if err != nil {
				return nil, nil, fmt.Errorf("backend: workload_user = %q: %w", cfg.user, err)
			}
			if uid == uint32(os.Geteuid()) || uid == 0 {
				return nil, nil, fmt.Errorf("backend: workload_user = %q: uid %d is the agent's or root: a workload running as it could reach the agent's files", cfg.user, uid)
			}
			w.fixed, w.fixedGid = &uid, gid
			iso.Users = fmt.Sprintf("user %s (uid %d), shared by every workload", name, uid)
		} else {
			iso.Users = fmt.Sprintf("uids %s, one per workload", w.uids)
		}
		if why := canIsolate(w.probeID()); why != "" {
			iso.Warning = "workloads cannot be isolated (" + why + "): no workload starts. Run the agent as root, " +
				"or set backend.isolation = \"none\" to run workloads as the agent's user, which lets any workload read its key file " +
				"and database (unsafe for workloads of third parties)"
			iso.refuse = fmt.Errorf("%s: set backend.isolation = none to run workloads unisolated: %w", why, ErrNotIsolated)
		} else {
			iso.Active, w.isolate = true, true
		}
	}
	if !iso.Active {
		iso.Users = "the agent's user (uid " + strconv.Itoa(os.Geteuid()) + ")"
	}
	if cfg.mode == IsolateNone {
		iso.Warning = "workload isolation is off (backend.isolation = none): workloads run as the agent's user with its " +
			"environment and can read its key file and database, publish as this provider and kill the agent; " +
			"unsafe for workloads of third parties"
	}
	if err := w.open(cfg.dir, cfg.label); err != nil {
		return nil, nil, err
	}
	iso.WorkloadDir = w.where()
	iso.Summary = iso.String()
	return iso, w, nil
}

// canIsolate says why the agent cannot run a process as uid id ("" when
// it can): it starts true(1) as that uid and gid without supplementary
// groups, as a supervisor starts a workload (or, without a true, its own
// binary as a probe that drops to that uid).
func canIsolate(id uint32) string {
	if os.Geteuid() != 0 {
		return fmt.Sprintf("the agent runs as uid %d, not root: running workloads as other users needs root", os.Geteuid())
	}
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{shimArgv0 + "-probe"},
		Env:  []string{shimEnv + "=" + probeEnvValue + ",uid=" + strconv.FormatUint(uint64(id), 10)},
	}
	for _, t := range []string{"/bin/true", "/usr/bin/true"} {
		if st, err := os.Stat(t); err == nil && st.Mode()&0o001 != 0 {
			cmd = &exec.Cmd{Path: t, Args: []string{"true"}, SysProcAttr: &syscall.SysProcAttr{
				Credential: &syscall.Credential{Uid: id, Gid: id, Groups: []uint32{}}}}
			break
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return "cannot change to uid " + strconv.FormatUint(uint64(id), 10) + ": " + msg
		}
		return "cannot change to uid " + strconv.FormatUint(uint64(id), 10) + ": " + err.Error()
	}
	return ""
}

// probeDropTo is the probe's half of canIsolate: it drops every id to id
// as the shim does for a workload, and reports the error.
func probeDropTo(id uint32) error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(int(id), int(id), int(id)); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(int(id), int(id), int(id)); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	return nil
}

// lookupUser resolves a user name or numeric uid to its uid and primary
// gid.
func lookupUser(s string) (uid, gid uint32, name string, err error) {
	var u *user.User
	if _, perr := strconv.ParseUint(s, 10, 32); perr == nil {
		u, err = user.LookupId(s)
		if err != nil {
			// A uid without a passwd entry: its own group number.
			n, _ := strconv.ParseUint(s, 10, 32)
			return uint32(n), uint32(n), s, nil
		}
	} else if u, err = user.Lookup(s); err != nil {
		return 0, 0, "", err
	}
	a, err1 := strconv.ParseUint(u.Uid, 10, 32)
	b, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, "", fmt.Errorf("user %s has uid %q gid %q", s, u.Uid, u.Gid)
	}
	return uint32(a), uint32(b), u.Username, nil
}

// workdirs are a backend's workload directories (see the layout above)
// and the uid each workload has. The directories are made by the first
// start, so an agent that runs nothing leaves nothing behind.
type workdirs struct {
	dir     string // the workload dir; "" for a temporary one
	label   string
	root    string // <workload dir>/<label>; "" until a temporary one is made
	temp    string // a temporary workload dir this backend made (removed by close)
	made    bool   // root exists
	isolate bool   // chown the leaves to the workloads' uids

	fixed    *uint32 // one configured user for every workload
	fixedGid uint32
	uids     UIDRange

	mu     sync.Mutex
	byName map[string]uint32 // workload name -> uid
	used   map[uint32]string // uid -> workload name
}

// workdir is one workload start's directories and identity.
type workdir struct {
	home, checkpoint string
	uid, gid         uint32 // meaningful when isolating
}

// probeID is the uid canIsolate tries.
func (w *workdirs) probeID() uint32 {
	if w.fixed != nil {
		return *w.fixed
	}
	return w.uids.First
}

// open names the backend's directory under dir (a temporary dir when dir
// is ""), checks that a workload user can reach it, and reads which
// workload has which uid.
func (w *workdirs) open(dir, label string) error {
	if label == "" {
		label = "backend"
	}
	w.dir, w.label = dir, label
	if dir == "" {
		return nil
	}
	w.root = filepath.Join(dir, label)
	if w.isolate {
		if err := reachable(w.root); err != nil {
			var closed *closedDirError
			if errors.As(err, &closed) {
				return fmt.Errorf("backend: workload_dir %s: %w: workload users could not reach their directories; "+
					"run 'chmod o+x %s', or pick a workload_dir whose parents others may search", dir, err, closed.path)
			}
			return fmt.Errorf("backend: workload_dir %s: %w", dir, err)
		}
	}
	ents, err := os.ReadDir(w.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("backend: workload dir: %w", err)
	}
	w.made = true
	for _, e := range ents {
		var st syscall.Stat_t
		if syscall.Lstat(filepath.Join(w.root, e.Name(), "home"), &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			continue
		}
		if w.isolate && w.fixed == nil && w.inRange(st.Uid) && w.used[st.Uid] == "" {
			w.byName[e.Name()], w.used[st.Uid] = st.Uid, e.Name()
		}
	}
	return nil
}

func (w *workdirs) inRange(uid uint32) bool { return uid >= w.uids.First && uid <= w.uids.Last }

// make creates the backend's directory (and the workload dir, or a
// temporary one). w.mu held.
func (w *workdirs) make() error {
	if w.made {
		return nil
	}
	if w.dir == "" {
		t, err := os.MkdirTemp("", "provider-agent-workloads-")
		if err == nil {
			err = os.Chmod(t, 0o711)
		}
		if err != nil {
			return err
		}
		w.temp, w.root = t, filepath.Join(t, w.label)
	} else if err := mkdirAllSearchable(w.dir); err != nil {
		return err
	}
	if err := mkdirOwned(w.root, 0o711, -1, -1); err != nil {
		return err
	}
	w.made = true
	return nil
}

// where names the workload dir for logs and /status.
func (w *workdirs) where() string {
	if w.dir == "" {
		return "a temporary directory"
	}
	return w.root
}

// close removes a temporary workload dir.
func (w *workdirs) close() {
	if w != nil && w.temp != "" {
		_ = os.RemoveAll(w.temp)
	}
}

// errNoUID means every uid of the range is some workload's.
var errNoUID = errors.New("every uid of backend.workload_uids belongs to a workload's directory: widen the range or remove directories of workloads that are gone")

// prepare makes the directories of workload name's start at epoch and
// returns them with the workload's uid.
func (w *workdirs) prepare(name string, epoch uint64) (workdir, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.make(); err != nil {
		return workdir{}, fmt.Errorf("workload directory: %w", err)
	}
	base := filepath.Join(w.root, name)
	d := workdir{home: filepath.Join(base, "home"), checkpoint: filepath.Join(base, "checkpoint", strconv.FormatUint(epoch, 10))}
	uid, gid := -1, -1
	if w.isolate {
		id, err := w.uidFor(name)
		if err != nil {
			return workdir{}, err
		}
		d.uid, d.gid = id, id
		if w.fixed != nil {
			d.gid = w.fixedGid
		}
		uid, gid = int(d.uid), int(d.gid)
	}
	for _, m := range []struct {
		path     string
		mode     os.FileMode
		uid, gid int
	}{
		{base, 0o711, -1, -1},
		{d.home, 0o700, uid, gid},
		{filepath.Dir(d.checkpoint), 0o711, -1, -1},
		{d.checkpoint, 0o700, uid, gid},
	} {
		if err := mkdirOwned(m.path, m.mode, m.uid, m.gid); err != nil {
			return workdir{}, fmt.Errorf("workload directory: %w", err)
		}
	}
	return d, nil
}

// uidFor returns the uid of workload name, giving it a free one of the
// range the first time. w.mu held.
func (w *workdirs) uidFor(name string) (uint32, error) {
	if w.fixed != nil {
		return *w.fixed, nil
	}
	if id, ok := w.byName[name]; ok {
		return id, nil
	}
	for id := w.uids.First; ; id++ {
		if w.used[id] == "" {
			w.byName[name], w.used[id] = id, name
			return id, nil
		}
		if id == w.uids.Last {
			return 0, errNoUID
		}
	}
}

// mkdirOwned makes dir (its parent exists and is root's) with mode, or
// checks the one there, and gives it to uid:gid (-1: the agent's). It
// never follows a symbolic link: a workload owns only leaves, but a leaf
// could have been swapped for a link by hand.
func mkdirOwned(dir string, mode os.FileMode, uid, gid int) error {
	err := os.Mkdir(dir, mode)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if uid < 0 {
		uid, gid = os.Geteuid(), os.Getegid()
	}
	if int(st.Uid) != uid || int(st.Gid) != gid {
		if err := os.Lchown(dir, uid, gid); err != nil {
			return err
		}
	}
	if os.FileMode(st.Mode).Perm() != mode {
		// Lchown left it a directory; Chmod follows no link here.
		if err := os.Chmod(dir, mode); err != nil {
			return err
		}
	}
	return nil
}

// mkdirAllSearchable makes dir and its missing parents mode 0711 whatever
// the umask (a unit's UMask=0077 would leave them 0700, which no workload
// user can pass); directories that exist are left as they are (reachable
// checked them at start).
func mkdirAllSearchable(dir string) error { return mkdirs.Make(dir, 0o711, 0o711) }

// closedDirError is a directory on the way to the workload dir that
// others may not search.
type closedDirError struct {
	path string
	mode os.FileMode
}

func (e *closedDirError) Error() string { return fmt.Sprintf("%s has mode %04o", e.path, e.mode) }

// reachable checks that a user other than the owner may search dir and
// every directory above it (those that do not exist yet are made so).
func reachable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := abs; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) && p != filepath.Dir(p) {
			continue
		}
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return &closedDirError{path: p, mode: st.Mode().Perm()}
		}
		if p == "/" || p == filepath.Dir(p) {
			return nil
		}
	}
}
