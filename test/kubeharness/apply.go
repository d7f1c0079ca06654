package kubeharness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side-apply field manager ApplyManifests uses.
const FieldManager = "kubeharness"

// mappingWait bounds how long ApplyManifests waits for a kind to appear in discovery, e.g. a
// custom resource whose CRD was applied earlier in the same manifest.
const mappingWait = 30 * time.Second

// applier applies unstructured objects through the dynamic client.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func (e *Env) getApplier() (*applier, error) {
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	if e.applier != nil {
		return e.applier, nil
	}
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(e.Config)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	e.applier = &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}
	return e.applier, nil
}

// ApplyManifests creates or updates every object in the YAML or JSON stream (documents
// separated by ---, `kind: List` expanded) as the administrator, in order, with server-side
// apply. Namespaced objects without a namespace go to "default". Kinds unknown to discovery
// (a CRD applied just before) are retried until they are served.
func (e *Env) ApplyManifests(ctx context.Context, manifests []byte) error {
	objs, err := DecodeManifests(manifests)
	if err != nil {
		return err
	}
	a, err := e.getApplier()
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := a.apply(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

// DecodeManifests parses a YAML or JSON stream of Kubernetes objects; empty documents are
// skipped and `kind: List` objects are expanded into their items.
func DecodeManifests(manifests []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode manifest document %d: %w", doc, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.IsList() {
			list, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("manifest document %d: %w", doc, err)
			}
			for i := range list.Items {
				item := &list.Items[i]
				if err := checkObject(item); err != nil {
					return nil, fmt.Errorf("manifest document %d item %d: %w", doc, i, err)
				}
				objs = append(objs, item)
			}
			continue
		}
		if err := checkObject(u); err != nil {
			return nil, fmt.Errorf("manifest document %d: %w", doc, err)
		}
		objs = append(objs, u)
	}
}

func checkObject(u *unstructured.Unstructured) error {
	if u.GetAPIVersion() == "" || u.GetKind() == "" {
		return errors.New("apiVersion and kind are required")
	}
	if _, err := schema.ParseGroupVersion(u.GetAPIVersion()); err != nil {
		return fmt.Errorf("apiVersion %q: %w", u.GetAPIVersion(), err)
	}
	if u.GetName() == "" {
		return fmt.Errorf("%s has no metadata.name", u.GetKind())
	}
	return nil
}

func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	desc := fmt.Sprintf("%s %s", gvk.Kind, obj.GetName())
	mapping, err := a.mapping(ctx, gvk)
	if err != nil {
		return fmt.Errorf("apply %s: %w", desc, err)
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(metav1.NamespaceDefault)
		}
		desc = fmt.Sprintf("%s %s/%s", gvk.Kind, obj.GetNamespace(), obj.GetName())
		ri = a.dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	}
	if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("apply %s: %w", desc, err)
	}
	return nil
}

// mapping resolves gvk, refreshing discovery while the kind is not (yet) served.
func (a *applier) mapping(ctx context.Context, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	ctx, cancel := context.WithTimeout(ctx, mappingWait)
	defer cancel()
	var m *meta.RESTMapping
	var lastErr error
	err := pollUntil(ctx, 200*time.Millisecond, func() (bool, error) {
		var err error
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			return true, nil
		}
		if !meta.IsNoMatchError(err) {
			return false, fmt.Errorf("map %s: %w", gvk, err)
		}
		lastErr = err
		a.mapper.Reset()
		return false, nil
	})
	if err != nil {
		if lastErr != nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("kind %s not served after %s: %w", gvk, mappingWait, lastErr)
		}
		return nil, err
	}
	return m, nil
}
