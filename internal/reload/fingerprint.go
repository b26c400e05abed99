package reload

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// maxDepth bounds how deep Fingerprint descends, so that a symlink cycle
// the visited-set cannot see (a bind mount, say) still ends. The loader
// refuses directories this deep, so no file it reads goes unwatched.
const maxDepth = descriptor.MaxDirectoryDepth

// Fingerprint summarises the trees at paths so that any change a
// configuration loader could see changes the fingerprint: the relative name,
// size and modification time of every file, and the SHA-256 of the content
// of every regular file up to descriptor.MaxFileSize (so a rewrite within
// one mtime tick is seen; the loader refuses larger files anyway).
//
// Symlinks are followed, to files and to directories; a directory reached
// twice along one path (a symlink cycle) is skipped, and one reached again
// along another path is recorded by its resolved name, not walked again
// (links that each reach a shared directory twice would otherwise double
// the walk per level). Entries whose name
// starts with a dot are skipped, as the loader skips them by default
// (FingerprintWith can include them): Kubernetes'
// `..data` and `..2024_...` directories are reached through the visible
// symlinks that point into them, so swapping `..data` changes the content
// seen through those symlinks and therefore the fingerprint.
//
// Paths are fingerprinted in the order given. An error (a path that does not
// exist, an unreadable file) is returned with the path that failed.
func Fingerprint(paths ...string) (string, error) {
	return FingerprintWith(FingerprintOptions{}, paths...)
}

// FingerprintOptions change what Fingerprint sees.
type FingerprintOptions struct {
	// DotFiles includes entries whose name starts with '.', except the
	// Kubernetes atomic writer's '..' entries, as the loader reads them
	// with descriptor.LoadOptions.DotFiles.
	DotFiles bool
}

// FingerprintWith is Fingerprint with options.
func FingerprintWith(o FingerprintOptions, paths ...string) (string, error) {
	h := sha256.New()
	walked := map[string]bool{}
	for i, p := range paths {
		fmt.Fprintf(h, "root %d %q\n", i, p)
		if err := walk(h, o, p, "", map[string]bool{}, walked, 0); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// walk writes one record per file under path into h. rel is path relative
// to the root being walked; onPath holds the resolved directories on the
// way down, to break symlink cycles; walked holds every resolved directory
// walked so far.
func walk(h hash.Hash, o FingerprintOptions, path, rel string, onPath, walked map[string]bool, depth int) error {
	fi, err := os.Stat(path) // follows symlinks
	if err != nil {
		return fmt.Errorf("fingerprint %s: %w", path, err)
	}
	if !fi.IsDir() {
		return hashFile(h, path, rel, fi)
	}
	if depth >= maxDepth {
		return nil
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("fingerprint %s: %w", path, err)
	}
	if onPath[real] {
		return nil
	}
	if walked[real] {
		fmt.Fprintf(h, "again %q %q\n", rel, real)
		return nil
	}
	walked[real] = true
	onPath[real] = true
	defer delete(onPath, real)

	entries, err := os.ReadDir(path)
	if err != nil {
		return fmt.Errorf("fingerprint %s: %w", path, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if n := e.Name(); !strings.HasPrefix(n, ".") || o.DotFiles && !strings.HasPrefix(n, "..") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	fmt.Fprintf(h, "dir %q\n", rel)
	for _, n := range names {
		err := walk(h, o, filepath.Join(path, n), filepath.Join(rel, n), onPath, walked, depth+1)
		if errors.Is(err, fs.ErrNotExist) {
			// A dangling symlink, or an entry removed while we walk:
			// record it as missing rather than failing the whole tree.
			fmt.Fprintf(h, "missing %q\n", filepath.Join(rel, n))
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func hashFile(h hash.Hash, path, rel string, fi fs.FileInfo) error {
	fmt.Fprintf(h, "file %q %d %d", rel, fi.Size(), fi.ModTime().UnixNano())
	if fi.Mode().IsRegular() && fi.Size() <= descriptor.MaxFileSize {
		// Opened without blocking and checked again: a file replaced by a
		// named pipe since the Stat must not block the watcher. The
		// change is recorded; the load then says what the path holds.
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("fingerprint %s: %w", path, err)
		}
		defer f.Close()
		if now, err := f.Stat(); err != nil || !now.Mode().IsRegular() {
			h.Write([]byte(" no longer regular\n"))
			return nil
		}
		c := sha256.New()
		if _, err := io.Copy(c, f); err != nil {
			return fmt.Errorf("fingerprint %s: %w", path, err)
		}
		h.Write([]byte(" " + hex.EncodeToString(c.Sum(nil))))
	}
	h.Write([]byte("\n"))
	return nil
}
