package unpack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
)

// Files a bundle must hold at its top.
const (
	ConfigFile = "config.json"
	IndexFile  = "model.safetensors.index.json"
)

// maxConfigBytes bounds config.json.
const maxConfigBytes = 4 << 20

// kinds maps a file extension to whether a bundle may hold it. Pickled
// weights and code are refused by name: the arena never unpickles or runs
// what a participant sends (there is no trust_remote_code here).
var kinds = map[string]reason.Code{
	".safetensors": "", ".json": "", ".txt": "", ".model": "", ".tiktoken": "", ".jinja": "", ".md": "",
	".patch": "", ".diff": "",
	".bin": reason.BundleUnsafeFile, ".pt": reason.BundleUnsafeFile, ".pth": reason.BundleUnsafeFile, ".pkl": reason.BundleUnsafeFile,
	".ckpt": reason.BundleUnsafeFile, ".pickle": reason.BundleUnsafeFile, ".npy": reason.BundleUnsafeFile, ".npz": reason.BundleUnsafeFile,
	".py": reason.BundleCodeFile, ".so": reason.BundleCodeFile, ".sh": reason.BundleCodeFile, ".pyc": reason.BundleCodeFile, ".exe": reason.BundleCodeFile,
}

// CheckKind refuses a file a bundle may not hold, by its extension:
// pickled weights, code, and kinds that are not part of a checkpoint.
func CheckKind(name string) error {
	ext := strings.ToLower(path.Ext(name))
	code, known := kinds[ext]
	switch {
	case !known:
		return refuse(reason.BundleUnexpectedFile, "%s: a bundle holds the checkpoint (config.json, *.safetensors, tokenizer files), its declaration and an optional engine patch; %q files are not among them", name, ext)
	case code == reason.BundleUnsafeFile:
		return refuse(code, "%s: pickled weights can run code when loaded; convert them to safetensors", name)
	case code == reason.BundleCodeFile:
		return refuse(code, "%s: the arena does not run code from a bundle; ship engine changes as a patch (engine.patch)", name)
	}
	return nil
}

// Check validates an unpacked bundle in dir whose files are files (as
// Unpack returned them) against the submission event that announced it:
// allowed kinds of file, submission.json valid and consistent with the
// event, config.json a JSON object, at least one safetensors file at the
// top, and the engine patch present when one is declared. Safetensors
// headers are the contract stage's to read.
func Check(dir string, files []events.FileDigest, in events.SubmissionReceivedData) (*bundle.Declaration, error) {
	have := map[string]bool{}
	safetensors := 0
	for _, f := range files {
		have[f.Path] = true
		if err := CheckKind(f.Path); err != nil {
			return nil, err
		}
		if strings.ToLower(path.Ext(f.Path)) == ".safetensors" {
			if strings.Contains(f.Path, "/") {
				return nil, refuse(reason.BundleUnexpectedFile, "%s: safetensors files belong at the top of the bundle, beside config.json", f.Path)
			}
			safetensors++
		}
	}

	if !have[bundle.DeclarationFile] {
		return nil, refuse(reason.BundleNoDeclaration, "the bundle has no %s at its top", bundle.DeclarationFile)
	}
	data, err := os.ReadFile(filepath.Join(dir, bundle.DeclarationFile))
	if err != nil {
		return nil, fmt.Errorf("unpack: read %s: %w", bundle.DeclarationFile, err)
	}
	decl, err := bundle.ParseDeclaration(data)
	if err != nil {
		msg := err.Error()
		var be *bundle.Error
		if errors.As(err, &be) {
			msg = be.Message
		}
		return nil, &Error{Code: reason.BundleBadDeclaration, Message: msg, Err: err}
	}
	var differ []string
	diff := func(field, inBundle, inEvent string) {
		if inBundle != inEvent {
			differ = append(differ, fmt.Sprintf("%s is %q in the bundle and %q in the submission", field, inBundle, inEvent))
		}
	}
	diff("task_id", decl.TaskID, in.TaskID)
	diff("split", decl.Split, in.Split)
	diff("participant", decl.Participant, in.Participant)
	diff("solution.checkpoint", decl.Solution.Checkpoint, in.Solution.Checkpoint)
	diff("solution.precision", decl.Solution.Precision, in.Solution.Precision)
	if len(differ) > 0 {
		return nil, refuse(reason.BundleDeclarationMismatch, "%s; submit the bundle again with arena submit", strings.Join(differ, "; "))
	}

	if !have[ConfigFile] {
		return nil, refuse(reason.BundleMissingConfig, "the bundle has no %s at its top; the checkpoint's config (with its quantization_config) is required", ConfigFile)
	}
	st, err := os.Stat(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("unpack: %w", err)
	}
	if st.Size() > maxConfigBytes {
		return nil, refuse(reason.BundleBadConfig, "%s is %d bytes; the limit is %d", ConfigFile, st.Size(), maxConfigBytes)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("unpack: %w", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(cfg, &obj); err != nil || obj == nil {
		why := "it is not a JSON object"
		if err != nil {
			why = err.Error()
		}
		return nil, refuse(reason.BundleBadConfig, "%s is not valid: %s", ConfigFile, why)
	}
	_, hasArch := obj["architectures"]
	_, hasType := obj["model_type"]
	if !hasArch && !hasType {
		return nil, refuse(reason.BundleBadConfig, "%s names neither architectures nor model_type; is it a model config?", ConfigFile)
	}

	if safetensors == 0 {
		return nil, refuse(reason.BundleNoSafetensors, "the bundle has no *.safetensors file at its top; the checkpoint's weights are required in safetensors form")
	}
	if decl.Engine != nil && decl.Engine.Patch != "" && !have[decl.Engine.Patch] {
		return nil, refuse(reason.BundleMissingPatch, "engine.patch names %s, which the bundle does not hold", decl.Engine.Patch)
	}
	return decl, nil
}
