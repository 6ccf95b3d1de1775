package rls

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Runtime is the directory the rules files live in, and how to read it:
// every regular file under Dir, subdirectories included, symbolic links
// followed. Names starting with ".." are always skipped: Kubernetes keeps
// the versions of a ConfigMap there (..data, ..2024_01_01...), and reading
// them too would define every domain twice. IgnoreDotFiles skips every name
// starting with '.'.
type Runtime struct {
	// Root is RUNTIME_ROOT; Dir is Root/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
	Root, Dir      string
	IgnoreDotFiles bool
	// Merge lets several files define one domain (MERGE_DOMAIN_CONFIG).
	Merge bool
}

// maxDepth bounds how deep Read follows directories, so that a symbolic
// link to a parent cannot send it round forever.
const maxDepth = 16

// Read reads every rules file, sorted by name, names relative to Dir.
func (r Runtime) Read() ([]File, error) {
	var files []File
	var walk func(dir, rel string, depth int) error
	walk = func(dir, rel string, depth int) error {
		if depth > maxDepth {
			return fmt.Errorf("rls: %s: directories nest deeper than %d", dir, maxDepth)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("rls: runtime directory: %w", err)
		}
		for _, e := range ents {
			name := e.Name()
			if strings.HasPrefix(name, "..") || (r.IgnoreDotFiles && strings.HasPrefix(name, ".")) {
				continue
			}
			path := filepath.Join(dir, name)
			st, err := os.Stat(path) // follows links
			if errors.Is(err, fs.ErrNotExist) {
				continue // a dangling link, or a file removed since ReadDir
			}
			if err != nil {
				return fmt.Errorf("rls: runtime directory: %w", err)
			}
			switch {
			case st.IsDir():
				if err := walk(path, filepath.Join(rel, name), depth+1); err != nil {
					return err
				}
			case st.Mode().IsRegular():
				data, err := os.ReadFile(path)
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					return fmt.Errorf("rls: runtime directory: %w", err)
				}
				files = append(files, File{Name: filepath.Join(rel, name), Data: data})
			}
		}
		return nil
	}
	if err := walk(r.Dir, "", 0); err != nil {
		return nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, nil
}

// watchDirs returns the directories whose changes can change what Read
// reads: Dir and every directory under it, and each directory from Dir's
// parent up to Root's parent, where swapping a symbolic link (Root itself,
// as the reference's runtime layout does, or a link on the way) is seen.
func (r Runtime) watchDirs() []string {
	dirs := []string{}
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if depth > maxDepth {
			return
		}
		dirs = append(dirs, dir)
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "..") {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				walk(p, depth+1)
			}
		}
	}
	walk(r.Dir, 0)
	stop := filepath.Dir(filepath.Clean(r.Root))
	for d := filepath.Dir(filepath.Clean(r.Dir)); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == stop || d == filepath.Dir(d) || !strings.HasPrefix(filepath.Clean(r.Dir), d) {
			break
		}
	}
	return dirs
}

// reloader loads the rules into a Service whenever they change.
type reloader struct {
	rt   Runtime
	svc  *Service
	log  *slog.Logger
	last [sha256.Size]byte // of the files last tried, loaded or not
	done bool              // whether anything was tried yet
	// loaded, if set, is called after a config loads (the health status
	// follows at once).
	loaded func()
}

// reload reads the runtime directory and, if it differs from what was last
// tried, loads it: the new config replaces the old, or the old one stays
// and the error is counted and logged.
func (rl *reloader) reload() {
	files, err := rl.rt.Read()
	var sum [sha256.Size]byte
	if err == nil {
		h := sha256.New()
		for _, f := range files {
			fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Data))
			h.Write(f.Data)
		}
		copy(sum[:], h.Sum(nil))
		if rl.done && sum == rl.last {
			return
		}
	}
	rl.done, rl.last = true, sum
	var cfg *Config
	if err == nil {
		cfg, err = LoadConfig(files, rl.rt.Merge)
	}
	if err != nil {
		rl.svc.ConfigError()
		rl.log.Error("rls: config not loaded; the previous one stays in use", "err", err)
		return
	}
	rl.svc.SetConfig(cfg)
	if rl.loaded != nil {
		rl.loaded()
	}
	rl.log.Info("rls: config loaded", "files", len(files), "domains", strings.Join(cfg.Domains(), ","))
}

// debounce is how long the watcher lets a burst of file events settle
// before it reloads: an editor's save or a ConfigMap swap is several.
const debounce = 50 * time.Millisecond

// watch reloads on every change under the runtime directory, and every
// poll interval as well (0: never) in case an event is missed, until ctx
// ends. It owns its fsnotify watcher.
func (rl *reloader) watch(ctx context.Context, poll time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rls: file watcher: %w", err)
	}
	defer w.Close()
	watched := map[string]bool{}
	rewatch := func() {
		want := map[string]bool{}
		for _, d := range rl.rt.watchDirs() {
			want[d] = true
		}
		for d := range watched {
			if !want[d] {
				_ = w.Remove(d)
				delete(watched, d)
			}
		}
		for d := range want {
			// Watching again after a link swap follows the new target.
			_ = w.Remove(d)
			if err := w.Add(d); err == nil {
				watched[d] = true
			} else {
				delete(watched, d)
			}
		}
	}
	rewatch()
	rl.reload() // what changed between the first load and the first watch
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			rl.log.Debug("rls: runtime directory changed", "event", ev.String())
			settle.Reset(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			rl.log.Warn("rls: file watcher", "err", err)
			settle.Reset(debounce)
		case <-settle.C:
			rewatch()
			rl.reload()
		case <-tick:
			rewatch()
			rl.reload()
		}
	}
}
