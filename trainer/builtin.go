package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
)

// Files the built-in trainer reads and writes.
const (
	// ModelFile is the ONNX model written to the output directory.
	ModelFile = "model.onnx"
	// ReferenceFile is the drift reference (drift.Reference as JSON).
	ReferenceFile = "reference.json"
	// MetricsFile holds Metrics as JSON.
	MetricsFile = "metrics.json"
	// LabelEnv names the label column when set in Job.Env; default: the
	// dataset's last column.
	LabelEnv = "STRATA_LABEL"
)

// Metrics summarise a built-in training run (MetricsFile).
// The fields mirror Result's.
type Metrics struct {
	// Kind is the model kind trained.
	Kind string `json:"kind"`
	// Features are the input columns, in order.
	Features []string `json:"features"`
	// Classes is the number of classes.
	Classes int `json:"classes"`
	// ClassNames are the classes' names when the labels were names.
	ClassNames []string `json:"class_names,omitempty"`
	// TrainRows and HoldoutRows count the split.
	TrainRows   int `json:"train_rows"`
	HoldoutRows int `json:"holdout_rows"`
	// Accuracy is on the holdout rows; TrainAccuracy on the training rows.
	Accuracy      float64 `json:"accuracy"`
	TrainAccuracy float64 `json:"train_accuracy"`
	// Loss is the mean training cross-entropy.
	Loss float64 `json:"loss"`
}

// Builtin runs the built-in Go trainer in process as a Launcher: it reads
// Job.Data (mixed as each file says), or else the first *.csv (in name
// order) under Job.DatasetDir, trains with Job.Train (or Config when nil),
// and writes ModelFile, ReferenceFile and MetricsFile to Job.OutputDir,
// and SiteReferencesFile when a file holds a site's own rows. It runs
// single-member jobs only.
type Builtin struct {
	// Config is used when a job carries none. Zero means the defaults.
	Config Config
	// Logger receives lifecycle records. Default: discard.
	Logger *slog.Logger
}

// Launch validates job and trains in a goroutine owned by the Run; ctx
// cancels training between epochs.
func (b *Builtin) Launch(ctx context.Context, job Job) (*Run, error) {
	job.EnsureDefaults()
	if err := job.Validate(); err != nil {
		return nil, err
	}
	if len(job.Members) != 1 {
		return nil, fmt.Errorf("%w: the built-in trainer runs on one member, job %q has %d", ErrNotSupported, job.ID, len(job.Members))
	}
	cfg := b.Config
	if job.Train != nil {
		cfg = *job.Train
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := b.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "trainer.builtin", "job", job.ID)
	r := newRun(job, DefaultLogLimit)
	go func() {
		r.mu.Lock()
		r.attempt = 1
		r.mu.Unlock()
		r.setState(StateRunning)
		r.setMember(0, StateRunning, -1, nil)
		m, err := trainDir(ctx, job, cfg)
		if err != nil {
			r.setMember(0, StateFailed, 1, err)
			log.Warn("training failed", "error", err)
			r.finish(err)
			return
		}
		fmt.Fprintf(r.logs[0], "trained %s on %d rows: holdout accuracy %.4f, loss %.4f\n", m.Kind, m.TrainRows, m.Accuracy, m.Loss)
		r.setMember(0, StateSucceeded, 0, nil)
		log.Info("training succeeded", "accuracy", m.Accuracy)
		r.finish(nil)
	}()
	return r, nil
}

func trainDir(ctx context.Context, job Job, cfg Config) (*Metrics, error) {
	files := job.Data
	if len(files) == 0 {
		matches, err := filepath.Glob(filepath.Join(job.DatasetDir, "*.csv"))
		if err != nil {
			return nil, err
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("%w: no *.csv file in %s", ErrDataset, job.DatasetDir)
		}
		sort.Strings(matches)
		files = []DataFile{{Path: matches[0]}}
	}
	var ds *Dataset
	var spans []span
	var err error
	if len(files) == 1 && files[0].Mix == 0 && files[0].Site == "" {
		var f *os.File
		if f, err = os.Open(files[0].Path); err != nil {
			return nil, err
		}
		ds, err = ReadCSV(f, job.Env[LabelEnv])
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", files[0].Path, err)
		}
	} else if ds, spans, err = readData(files, job.Env[LabelEnv], cfg.Seed); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(job.OutputDir, 0o755); err != nil {
		return nil, err
	}
	steps := filepath.Join(job.OutputDir, StepsFile)
	_ = os.Remove(steps) // a restarted attempt reports from its first epoch
	var stepErr error
	cfg.Progress = func(s Step) {
		if stepErr == nil {
			stepErr = appendStep(steps, s)
		}
	}
	res, err := Train(ctx, ds, cfg)
	if err != nil {
		return nil, err
	}
	if stepErr != nil {
		return nil, stepErr
	}
	sites, err := siteReferences(res, ds, spans, cfg.Summary)
	if err != nil {
		return nil, err
	}
	cfg.EnsureDefaults()
	m := &Metrics{
		Kind: cfg.Kind, Features: res.Features, Classes: res.Classes, ClassNames: res.ClassNames,
		TrainRows: res.TrainRows, HoldoutRows: res.HoldoutRows,
		Accuracy: res.Accuracy, TrainAccuracy: res.TrainAccuracy, Loss: res.Loss,
	}
	ref, err := json.Marshal(res.Reference)
	if err != nil {
		return nil, err
	}
	met, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(job.OutputDir, 0o755); err != nil {
		return nil, err
	}
	out := map[string][]byte{ModelFile: res.Model, ReferenceFile: ref, MetricsFile: met}
	if sites != nil {
		if out[SiteReferencesFile], err = json.Marshal(sites); err != nil {
			return nil, err
		}
	}
	for name, data := range out {
		if err := writeFileAtomic(filepath.Join(job.OutputDir, name), data); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// writeFileAtomic writes through a temporary file and a rename, so a reader
// never sees half a model.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
