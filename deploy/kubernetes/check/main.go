// Command check validates txgate's Kubernetes manifests without a cluster:
// every document is decoded strictly into the real Kubernetes API types
// (an unknown or misplaced field is an error, as the API server's strict
// field validation would say), the objects are checked against each other
// (selectors, probe ports, the config file's key), and the ConfigMap's
// txgate.toml is written out for `txgate check-config`.
//
// kubeconform would need its JSON schemas from the network; the API types
// themselves come from the Go module proxy like any dependency.
//
// Usage: go run . -dir .. -toml /tmp/txgate.toml
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Labels     []any    `json:"labels,omitempty"`
}

type objects struct {
	deployments []appsv1.Deployment
	services    []corev1.Service
	configMaps  []corev1.ConfigMap
	pdbs        []policyv1.PodDisruptionBudget
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "deploy/kubernetes: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	dir := flag.String("dir", "..", "the manifests' folder")
	toml := flag.String("toml", "", "where to write the ConfigMap's txgate.toml")
	flag.Parse()

	var k kustomization
	raw, err := os.ReadFile(filepath.Join(*dir, "kustomization.yaml"))
	if err != nil {
		fail("%v", err)
	}
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		fail("kustomization.yaml: %v", err)
	}
	if len(k.Resources) == 0 {
		fail("kustomization.yaml lists no resources")
	}
	var all objects
	for _, name := range k.Resources {
		raw, err := os.ReadFile(filepath.Join(*dir, name))
		if err != nil {
			fail("kustomization.yaml lists %s: %v", name, err)
		}
		for i, doc := range bytes.Split(raw, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			decode(&all, fmt.Sprintf("%s#%d", name, i+1), doc)
		}
	}
	check(&all, *toml)
	fmt.Printf("deploy/kubernetes: %d deployment, %d service, %d configmap, %d pdb: valid\n",
		len(all.deployments), len(all.services), len(all.configMaps), len(all.pdbs))
}

func decode(all *objects, where string, doc []byte) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		fail("%s: %v", where, err)
	}
	strict := func(into any) {
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			fail("%s (%s): %v", where, head.Kind, err)
		}
	}
	switch head.APIVersion + "/" + head.Kind {
	case "apps/v1/Deployment":
		var d appsv1.Deployment
		strict(&d)
		all.deployments = append(all.deployments, d)
	case "v1/Service":
		var s corev1.Service
		strict(&s)
		all.services = append(all.services, s)
	case "v1/ConfigMap":
		var c corev1.ConfigMap
		strict(&c)
		all.configMaps = append(all.configMaps, c)
	case "policy/v1/PodDisruptionBudget":
		var p policyv1.PodDisruptionBudget
		strict(&p)
		all.pdbs = append(all.pdbs, p)
	default:
		fail("%s: unexpected %s %s", where, head.APIVersion, head.Kind)
	}
}

func check(all *objects, toml string) {
	if len(all.deployments) != 1 || len(all.services) == 0 || len(all.configMaps) != 1 || len(all.pdbs) != 1 {
		fail("want one Deployment, a Service, one ConfigMap and one PodDisruptionBudget")
	}
	d := all.deployments[0]
	pod := labels.Set(d.Spec.Template.Labels)
	if d.Spec.Selector == nil || !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(pod) {
		fail("Deployment %s: its selector does not match its pod template", d.Name)
	}
	for _, s := range all.services {
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(pod) {
			fail("Service %s selects no txgate pod", s.Name)
		}
	}
	p := all.pdbs[0]
	if p.Spec.Selector == nil || !labels.SelectorFromSet(p.Spec.Selector.MatchLabels).Matches(pod) {
		fail("PodDisruptionBudget %s selects no txgate pod", p.Name)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		fail("Deployment %s: want one container", d.Name)
	}
	c := d.Spec.Template.Spec.Containers[0]
	ports := map[string]int32{}
	for _, port := range c.Ports {
		ports[port.Name] = port.ContainerPort
	}
	for name, probe := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			fail("container %s: no HTTP %s probe", c.Name, name)
		}
		port := probe.HTTPGet.Port.String()
		if _, ok := ports[port]; !ok {
			fail("container %s: the %s probe's port %q is not a declared port", c.Name, name, port)
		}
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		fail("container %s: readiness must be /readyz, liveness /healthz", c.Name)
	}
	for _, s := range all.services {
		for _, sp := range s.Spec.Ports {
			if _, ok := ports[sp.TargetPort.String()]; !ok {
				fail("Service %s: target port %q is not a declared container port", s.Name, sp.TargetPort.String())
			}
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		fail("container %s: must run as non-root on a read-only root filesystem", c.Name)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		fail("container %s: no preStop: the balancer would not notice the drain", c.Name)
	}
	config, ok := all.configMaps[0].Data["txgate.toml"]
	if !ok {
		fail("ConfigMap %s has no txgate.toml", all.configMaps[0].Name)
	}
	mounted := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == all.configMaps[0].Name {
			mounted = true
		}
	}
	if !mounted {
		fail("Deployment %s does not mount ConfigMap %s", d.Name, all.configMaps[0].Name)
	}
	if !strings.Contains(strings.Join(c.Args, " "), "/etc/txgate/txgate.toml") {
		fail("container %s is not started with /etc/txgate/txgate.toml", c.Name)
	}
	if toml != "" {
		if err := os.WriteFile(toml, []byte(config), 0o600); err != nil {
			fail("%v", err)
		}
	}
}
