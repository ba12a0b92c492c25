package trainer

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// A job's code travels as a code artifact: a tar archive of regular files
// and directories, unpacked into the job's working directory on every
// node that runs one of its ranks.

// Limits on a code archive, so that a bad archive cannot fill a disk.
const (
	MaxCodeBytes = 256 << 20
	MaxCodeFiles = 10000
)

// ErrCode wraps every problem with a code archive.
var ErrCode = errors.New("trainer: bad code archive")

// PackCode writes root (a directory, or one file) to w as a code archive.
// The archive depends on the files' names, contents and executable bits
// only: packing the same tree twice gives the same bytes, hence the same
// digest. Hidden entries (".git", "__pycache__" and the like) are left
// out, as are symbolic links and anything not a regular file.
func PackCode(w io.Writer, root string) error {
	info, err := os.Stat(root)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	files, bytes := 0, int64(0)
	add := func(p string, fi fs.FileInfo, name string) error {
		hdr := &tar.Header{Name: name, Mode: 0o755, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			return tw.WriteHeader(hdr)
		case !fi.Mode().IsRegular():
			return nil
		}
		files++
		bytes += fi.Size()
		if files > MaxCodeFiles || bytes > MaxCodeBytes {
			return fmt.Errorf("%w: %s holds more than %d files or %d MiB", ErrCode, root, MaxCodeFiles, MaxCodeBytes>>20)
		}
		if fi.Mode()&0o111 == 0 {
			hdr.Mode = 0o644
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, fi.Size())
		return err
	}
	if !info.IsDir() {
		if err := add(root, info, filepath.Base(root)); err != nil {
			return err
		}
		return tw.Close()
	}
	// WalkDir visits in lexical order: the archive is deterministic.
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") || d.Name() == "__pycache__" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		return add(p, fi, filepath.ToSlash(rel))
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// UnpackCode extracts a code archive into dir (created if need be). It
// refuses, with an error wrapping ErrCode, an archive with entries other
// than regular files and directories, with names that are absolute or
// leave dir, or beyond MaxCodeFiles and MaxCodeBytes. With dir "" it only
// checks the archive.
func UnpackCode(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	files, bytes := 0, int64(0)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if files == 0 {
				return fmt.Errorf("%w: no files in it", ErrCode)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCode, err)
		}
		name := path.Clean(hdr.Name)
		if !fs.ValidPath(name) || name == "." {
			return fmt.Errorf("%w: entry %q is not a relative path inside the archive", ErrCode, hdr.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if dir != "" {
				if err := os.MkdirAll(target, 0o755); err != nil {
					return err
				}
			}
			continue
		case tar.TypeReg:
		default:
			return fmt.Errorf("%w: entry %q is not a regular file or directory", ErrCode, hdr.Name)
		}
		files++
		bytes += hdr.Size
		if files > MaxCodeFiles || bytes > MaxCodeBytes {
			return fmt.Errorf("%w: more than %d files or %d MiB", ErrCode, MaxCodeFiles, MaxCodeBytes>>20)
		}
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if hdr.Mode&0o111 != 0 {
			mode = 0o755
		}
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
		if err != nil {
			return err
		}
		_, err = io.CopyN(f, tr, hdr.Size)
		if err = errors.Join(err, f.Close()); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrCode, name, err)
		}
	}
}
