// Command olm-validate loads an OLM bundle directory (registry+v1 format) and runs the
// operator-framework validators on it, as `operator-sdk bundle validate` would, without a container
// engine or network. Warnings are printed; errors (and, with -strict, warnings) exit non-zero.
//
//	olm-validate [-strict] [-k8s-version 1.33] bundle/
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
	"sigs.k8s.io/yaml"
)

// The validators that need nothing outside the bundle. Left out: MultipleArchitecturesValidator
// (inspects images with docker/podman), CommunityOperatorValidator (deprecated, needs an index
// checkout) and PackageManifestValidator (the old format).
var validators = validation.DefaultBundleValidators.WithValidators(
	validation.OperatorHubV2Validator,
	validation.StandardCapabilitiesValidator,
	validation.StandardCategoriesValidator,
	validation.ObjectValidator,
	validation.OperatorGroupValidator,
	validation.AlphaDeprecatedAPIsValidator,
	validation.GoodPracticesValidator,
)

// The bundle image labels OLM reads from metadata/annotations.yaml (registry+v1).
var requiredAnnotations = map[string]string{
	"operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
	"operators.operatorframework.io.bundle.manifests.v1": "manifests/",
	"operators.operatorframework.io.bundle.metadata.v1":  "metadata/",
	"operators.operatorframework.io.bundle.package.v1":   "",
	"operators.operatorframework.io.bundle.channels.v1":  "",
}

func main() {
	strict := flag.Bool("strict", false, "treat warnings as errors")
	k8sVersion := flag.String("k8s-version", "", "Kubernetes version for the deprecated-API checks (default: the CSV's minKubeVersion)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [-strict] [-k8s-version X.Y] BUNDLE_DIR\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	dir := flag.Arg(0)

	var errs, warns []string
	errs = append(errs, checkAnnotations(dir)...)

	bundle, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		errs = append(errs, fmt.Sprintf("loading %s: %v", dir, err))
	}
	if bundle != nil {
		objs := bundle.ObjectsToValidate()
		if *k8sVersion != "" {
			objs = append(objs, map[string]string{"k8s-version": *k8sVersion})
		}
		for _, result := range validators.Validate(objs...) {
			for _, e := range result.Errors {
				errs = append(errs, describe(result, e))
			}
			for _, w := range result.Warnings {
				warns = append(warns, describe(result, w))
			}
		}
	}

	for _, w := range dedupe(warns) {
		fmt.Println("WARN ", w)
	}
	for _, e := range dedupe(errs) {
		fmt.Println("ERROR", e)
	}
	name := "?"
	if bundle != nil {
		name = bundle.Name
	}
	fmt.Printf("bundle %s: %d error(s), %d warning(s)\n", name, len(dedupe(errs)), len(dedupe(warns)))
	if len(errs) > 0 || (*strict && len(warns) > 0) {
		os.Exit(1)
	}
}

func describe(result errors.ManifestResult, e errors.Error) string {
	return fmt.Sprintf("%s: %s", result.Name, e.Error())
}

// checkAnnotations reads metadata/annotations.yaml: the loader takes package and channels from it
// but reports nothing when keys are missing or misspelt.
func checkAnnotations(dir string) []string {
	path := filepath.Join(dir, "metadata", "annotations.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	var file struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.UnmarshalStrict(data, &file); err != nil {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	var out []string
	for key, want := range requiredAnnotations {
		got, ok := file.Annotations[key]
		switch {
		case !ok || got == "":
			out = append(out, fmt.Sprintf("%s: %s is missing", path, key))
		case want != "" && got != want:
			out = append(out, fmt.Sprintf("%s: %s is %q, want %q", path, key, got, want))
		}
	}
	sort.Strings(out)
	return out
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
