package docs

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// ruleFiles are the Prometheus rule files in docs/, each with the metric
// families its expressions must name.
var ruleFiles = []struct {
	file     string
	families func(*testing.T) map[string]family
}{
	{"prometheus-rules.yml", exported},
	{"prometheus-rules-otel.yml", otelExported},
}

// ruleGroups is a Prometheus rule file, as far as these tests read it.
type ruleGroups struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// recordedRE matches the names of recording rules: level:metric:operations.
var recordedRE = regexp.MustCompile(`\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b`)

// TestRuleFiles checks each rule file: it parses (unknown fields are
// errors), every rule is a recording rule or an alert with an expression,
// every alert has a severity and a summary, every recorded series an alert
// reads is recorded in the file, and every metric, label and label value
// is one the observer exports.
func TestRuleFiles(t *testing.T) {
	t.Parallel()
	var alertSets [][]string
	for _, rf := range ruleFiles {
		t.Run(rf.file, func(t *testing.T) {
			data, err := os.ReadFile(rf.file)
			if err != nil {
				t.Fatal(err)
			}
			var rg ruleGroups
			if err := yaml.UnmarshalWithOptions(data, &rg, yaml.Strict()); err != nil {
				t.Fatalf("%s: %v", rf.file, err)
			}
			if len(rg.Groups) == 0 {
				t.Fatalf("%s has no rule groups", rf.file)
			}
			fams := rf.families(t)
			recorded := map[string]bool{}
			var alerts []string
			covered := map[string]bool{}
			for _, g := range rg.Groups {
				for i, r := range g.Rules {
					where := rf.file + ": " + g.Name + " rule " + r.Alert + r.Record
					switch {
					case (r.Alert == "") == (r.Record == ""):
						t.Errorf("%s (#%d): want exactly one of alert and record", where, i)
					case strings.TrimSpace(r.Expr) == "":
						t.Errorf("%s: no expr", where)
					}
					if r.Record != "" {
						if !recordedRE.MatchString(r.Record) {
							t.Errorf("%s: a recorded name is level:metric:operations", where)
						}
						recorded[r.Record] = true
					}
					if r.Alert != "" {
						alerts = append(alerts, r.Alert)
						if s := r.Labels["severity"]; s != "page" && s != "ticket" {
							t.Errorf("%s: severity %q, want page or ticket", where, s)
						}
						if r.Annotations["summary"] == "" {
							t.Errorf("%s: no summary annotation", where)
						}
						for _, name := range recordedRE.FindAllString(r.Expr, -1) {
							if !recorded[name] {
								t.Errorf("%s reads %s, which no rule before it records", where, name)
							}
						}
					}
					if r.For != "" && !promDurationRE.MatchString(r.For) {
						t.Errorf("%s: for %q is not a Prometheus duration", where, r.For)
					}
					for _, p := range checkQuery(where, r.Expr, fams, true) {
						t.Error(p)
					}
					for _, name := range metricNames(r.Expr) {
						if base, ok := resolve(name, fams); ok {
							covered[base] = true
						}
					}
					// Labels an annotation reads must survive the
					// expression's aggregation.
					for _, m := range annotationLabelRE.FindAllStringSubmatch(r.Annotations["summary"]+r.Annotations["description"], -1) {
						if !strings.Contains(r.Expr, m[1]) && m[1] != "job" {
							t.Errorf("%s: an annotation reads $labels.%s, which its expression does not keep", where, m[1])
						}
					}
				}
			}
			if len(alerts) < 5 {
				t.Errorf("%s has %d alerts, want at least 5", rf.file, len(alerts))
			}
			for _, want := range []string{"sluice_store_up", "sluice_store_outages_total"} {
				if !covered[want] {
					t.Errorf("%s never reads %s", rf.file, want)
				}
			}
			slices.Sort(alerts)
			alertSets = append(alertSets, alerts)
		})
	}
	// The two files are one set of alerts for two namings.
	if len(alertSets) == 2 && !slices.Equal(alertSets[0], alertSets[1]) {
		t.Errorf("the rule files alert differently: %v and %v", alertSets[0], alertSets[1])
	}
}

// promDurationRE matches a Prometheus duration such as 5m or 1h30m.
var promDurationRE = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

// annotationLabelRE matches a label read in an alert's template.
var annotationLabelRE = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// TestRuleFilesPromtool runs promtool check rules on the rule files, when
// promtool is on PATH (Debian's package prometheus installs it).
func TestRuleFilesPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH; install Prometheus (apt install prometheus) to check the rule files with it")
	}
	for _, rf := range ruleFiles {
		out, err := exec.Command(promtool, "check", "rules", rf.file).CombinedOutput()
		if err != nil {
			t.Errorf("promtool check rules %s: %v\n%s", rf.file, err, out)
		}
	}
}
