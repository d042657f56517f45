// Command node-agent simulates one machine's kubelet for the end-to-end harness.
//
// The machine's power is a file another process rewrites atomically ("On"/"Off"; missing = Off) and a
// network partition is the existence of another file. Only while the machine is On and not partitioned
// does the agent write to the API: it registers the Node (once per boot, if missing), keeps Ready=True
// with a fresh heartbeat, renews the node Lease and runs pods bound to the node (Pending → Running,
// Terminating → deleted). Otherwise it writes nothing at all, exactly like a dead or cut-off kubelet, so
// kube-controller-manager's node lifecycle controller marks the node Unknown after its grace period.
// Every Off→On transition is a fresh boot with a new bootID.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeletVersion is what the simulated kubelet reports (the harness's Kubernetes release).
const kubeletVersion = "v1.36.3"

type agent struct {
	client                   kubernetes.Interface
	node, systemUUID         string
	powerFile, partitionFile string
	labels                   map[string]string
	address                  string // InternalIP and hostIP
	podNet                   string // first three octets of this node's pod IPs
	leaseDuration            time.Duration

	started, on, partitioned bool   // state seen at the last tick
	writing                  bool   // false after any gap in API writes (power off, partition, start)
	bootID                   string // changes on every Off→On
	needRegister             bool   // create the Node if missing: once per boot, like a kubelet
	nodeGone                 bool   // the Node was deleted while running: wait for the next boot
	nodeUID                  types.UID
	readySince               metav1.Time // lastTransitionTime of our Ready=True
	lease                    *coordinationv1.Lease
	running                  map[types.UID]string // pod → bootID it was last reported Running in
	podIPs                   map[types.UID]string
	deleted                  map[types.UID]bool // deletions confirmed (logged once; finalizers may keep the pod)
	nextIP                   int
	lastErr                  string
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), fmt.Sprintf(format, args...))
}

func main() {
	var (
		kubeconfig = flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (the harness uses the admin one)")
		node       = flag.String("node", "", "Node name (required)")
		systemUUID = flag.String("system-uuid", "", "status.nodeInfo.systemUUID (required)")
		power      = flag.String("power-state-file", "", "file holding the machine's power, On or Off; missing = Off (required)")
		partition  = flag.String("partition-file", "", "while this file exists the node's network is cut: no API writes")
		labels     = flag.String("labels", "", "extra Node labels k=v,k=v (set only when the agent creates the Node)")
		address    = flag.String("address", "", "InternalIP (default 127.0.1.N derived from the node name)")
		heartbeat  = flag.Duration("heartbeat", time.Second, "status, lease and pod sync period")
		leaseDur   = flag.Duration("lease-duration", 40*time.Second, "node Lease leaseDurationSeconds")
	)
	flag.Parse()
	if *node == "" || *systemUUID == "" || *power == "" {
		fmt.Fprintln(os.Stderr, "node-agent: --node, --system-uuid and --power-state-file are required")
		os.Exit(2)
	}
	lbls, err := parseLabels(*labels)
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-agent:", err)
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-agent:", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = 50, 100 // a heartbeat is several requests; do not let client-side throttling skew timings
	cfg.UserAgent = "node-agent/" + *node
	cfg.Timeout = 5 * time.Second

	octet := 1 + int(hash(*node)%250)
	a := &agent{
		client: kubernetes.NewForConfigOrDie(cfg), node: *node, systemUUID: *systemUUID,
		powerFile: *power, partitionFile: *partition, labels: lbls, leaseDuration: *leaseDur,
		address: *address, podNet: fmt.Sprintf("10.244.%d", octet),
		running: map[types.UID]string{}, podIPs: map[types.UID]string{}, deleted: map[types.UID]bool{},
	}
	if a.address == "" {
		a.address = fmt.Sprintf("127.0.1.%d", octet)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf("node %s: agent started (system UUID %s, address %s, heartbeat %s)", a.node, a.systemUUID, a.address, *heartbeat)
	ticker := time.NewTicker(*heartbeat)
	defer ticker.Stop()
	for {
		a.tick(context.Background()) // a started tick finishes (requests time out after 5 s); stop between ticks
		select {
		case <-ctx.Done():
			logf("node %s: agent stopping; the Node is left as it is", a.node)
			return
		case <-ticker.C:
		}
	}
}

// tick observes power and partition, then, only if the machine is up and reachable, does one
// round of kubelet work.
func (a *agent) tick(ctx context.Context) {
	on, raw := a.readPower()
	partitioned := a.partitionFile != "" && exists(a.partitionFile)
	if !a.started || on != a.on {
		if on {
			a.bootID = string(uuid.NewUUID())
			a.needRegister, a.nodeGone, a.lease = true, false, nil
			clear(a.running)
			logf("node %s: power On (%q): boot %s", a.node, raw, a.bootID)
		} else {
			logf("node %s: power Off (%q): no API writes", a.node, raw)
		}
		a.on = on
	}
	if !a.started || partitioned != a.partitioned {
		if partitioned {
			logf("node %s: partition start (%s exists): no API writes", a.node, a.partitionFile)
		} else if a.started {
			logf("node %s: partition end", a.node)
		}
		a.partitioned = partitioned
	}
	a.started = true
	if !on || partitioned {
		a.writing = false
		return
	}
	if !a.writing {
		// First write after a gap: read the Node so a still-True Ready keeps its transition time.
		if err := a.ensureNode(ctx); err != nil {
			a.report("node", err)
			return
		}
		a.writing = true
	}
	if a.nodeGone {
		return
	}
	now := metav1.Now()
	if err := a.postStatus(ctx, now); err != nil || a.nodeGone {
		a.report("node status", err)
		return
	}
	if err := a.renewLease(ctx, now); err != nil {
		a.report("lease", err)
		return
	}
	if err := a.syncPods(ctx); err != nil {
		a.report("pods", err)
		return
	}
	a.report("", nil)
}

// report logs an error only when it differs from the previous one, and the recovery.
func (a *agent) report(what string, err error) {
	msg := ""
	if err != nil {
		msg = what + ": " + err.Error()
	}
	if msg != a.lastErr {
		if msg == "" {
			logf("node %s: API writes succeed again", a.node)
		} else {
			logf("node %s: %s", a.node, msg)
		}
		a.lastErr = msg
	}
}

func (a *agent) readPower() (bool, string) {
	b, err := os.ReadFile(a.powerFile)
	if err != nil {
		return false, "missing"
	}
	s := strings.TrimSpace(string(b))
	return s == "On", s
}

// ensureNode reads the Node and creates it if missing and this boot has not registered yet.
func (a *agent) ensureNode(ctx context.Context) error {
	a.readySince = metav1.Now()
	n, err := a.client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && a.needRegister:
		n = &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: a.node, Labels: map[string]string{
				"kubernetes.io/hostname": a.node, "kubernetes.io/os": "linux", "kubernetes.io/arch": runtime.GOARCH,
			}},
			Status: a.status(metav1.Now()),
		}
		for k, v := range a.labels {
			n.Labels[k] = v
		}
		if n, err = a.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return err
		}
		logf("node %s: registered Node (uid %s)", a.node, n.UID)
	case apierrors.IsNotFound(err):
		a.nodeGone = true
		logf("node %s: Node is gone; it registers again on the next boot", a.node)
		return nil
	case err != nil:
		return err
	default:
		if a.needRegister {
			logf("node %s: Node already registered (uid %s)", a.node, n.UID)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				a.readySince = c.LastTransitionTime
			}
		}
	}
	a.needRegister, a.nodeUID = false, n.UID
	return nil
}

// postStatus patches only what a kubelet owns: its conditions (merged by type, others are kept),
// addresses, capacity and nodeInfo. Spec (taints!) and metadata are never touched.
func (a *agent) postStatus(ctx context.Context, now metav1.Time) error {
	patch, err := json.Marshal(map[string]any{"status": a.status(now)})
	if err != nil {
		return err
	}
	_, err = a.client.CoreV1().Nodes().Patch(ctx, a.node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		a.nodeGone = true
		logf("node %s: Node was deleted; it registers again on the next boot", a.node)
		return nil
	}
	return err
}

func (a *agent) status(now metav1.Time) corev1.NodeStatus {
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: a.readySince}
	}
	resources := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	return corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
		},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a.address}, {Type: corev1.NodeHostName, Address: a.node}},
		Capacity:  resources, Allocatable: resources,
		NodeInfo: corev1.NodeSystemInfo{
			MachineID: strings.ReplaceAll(a.systemUUID, "-", ""), SystemUUID: a.systemUUID, BootID: a.bootID,
			KernelVersion: "6.1.0-harness", OSImage: "coroner harness node-agent", ContainerRuntimeVersion: "fake://1.0",
			KubeletVersion: kubeletVersion, OperatingSystem: "linux", Architecture: runtime.GOARCH,
		},
	}
}

func (a *agent) renewLease(ctx context.Context, now metav1.Time) error {
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	micro := metav1.NewMicroTime(now.Time)
	if a.lease == nil {
		l, err := leases.Get(ctx, a.node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			secs := int32(a.leaseDuration.Seconds())
			l = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: a.node, Namespace: corev1.NamespaceNodeLease, OwnerReferences: []metav1.OwnerReference{
					{APIVersion: "v1", Kind: "Node", Name: a.node, UID: a.nodeUID},
				}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &a.node, LeaseDurationSeconds: &secs, RenewTime: &micro},
			}
			a.lease, err = leases.Create(ctx, l, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		a.lease = l
	}
	l := a.lease.DeepCopy()
	l.Spec.RenewTime = &micro
	updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		a.lease = nil // re-read next time (conflict, or someone deleted it)
		return err
	}
	a.lease = updated
	return nil
}

// syncPods is the kubelet's pod loop, reduced to status: terminating pods are confirmed deleted,
// others are reported Running and Ready once per boot (and again if someone marked them not ready).
func (a *agent) syncPods(ctx context.Context) error {
	pods, err := a.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + a.node})
	if err != nil {
		return err
	}
	var errs []error
	for i := range pods.Items {
		p := &pods.Items[i]
		key := p.Namespace + "/" + p.Name
		switch {
		case p.DeletionTimestamp != nil:
			zero := int64(0)
			err := a.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
				GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID},
			})
			if err == nil && !a.deleted[p.UID] {
				a.deleted[p.UID] = true
				logf("node %s: pod %s deleted (confirmed termination)", a.node, key)
			} else if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, err)
			}
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		case a.running[p.UID] == a.bootID && podReady(p):
		default:
			restarted := a.running[p.UID] != a.bootID && p.Status.Phase == corev1.PodRunning
			a.setRunning(p, restarted)
			if _, err := a.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
				continue
			}
			a.running[p.UID] = a.bootID
			logf("node %s: pod %s Running (ip %s, boot %s)", a.node, key, p.Status.PodIP, a.bootID)
		}
	}
	return errors.Join(errs...)
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setRunning fills in the status a kubelet reports once every container started. restarted means the
// pod ran in an earlier boot, so its containers count one more restart.
func (a *agent) setRunning(p *corev1.Pod, restarted bool) {
	now := metav1.Now()
	ip, ok := a.podIPs[p.UID]
	if !ok {
		ip = fmt.Sprintf("%s.%d", a.podNet, 2+a.nextIP%250)
		a.nextIP++
		a.podIPs[p.UID] = ip
	}
	s := &p.Status
	s.Phase = corev1.PodRunning
	s.HostIP, s.HostIPs = a.address, []corev1.HostIP{{IP: a.address}}
	s.PodIP, s.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	if s.StartTime == nil {
		s.StartTime = &now
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		setPodCondition(s, t, now)
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	status := func(c corev1.Container, old []corev1.ContainerStatus, state corev1.ContainerState) corev1.ContainerStatus {
		restarts := int32(0)
		for _, o := range old {
			if o.Name == c.Name {
				restarts = o.RestartCount
				if restarted {
					restarts++
				}
			}
		}
		started := true
		return corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image, Ready: true, Started: &started, State: state,
			ContainerID: fmt.Sprintf("fake://%s-%s-%d", p.UID, c.Name, restarts), RestartCount: restarts,
		}
	}
	var inits []corev1.ContainerStatus
	for _, c := range p.Spec.InitContainers {
		state := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: now, FinishedAt: now}}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			state = running // a sidecar keeps running
		}
		inits = append(inits, status(c, s.InitContainerStatuses, state))
	}
	var containers []corev1.ContainerStatus
	for _, c := range p.Spec.Containers {
		containers = append(containers, status(c, s.ContainerStatuses, running))
	}
	s.InitContainerStatuses, s.ContainerStatuses = inits, containers
}

func setPodCondition(s *corev1.PodStatus, t corev1.PodConditionType, now metav1.Time) {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			if s.Conditions[i].Status != corev1.ConditionTrue {
				s.Conditions[i].Status, s.Conditions[i].LastTransitionTime = corev1.ConditionTrue, now
				s.Conditions[i].Reason, s.Conditions[i].Message = "", ""
			}
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
}

func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("bad label %q, want key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func hash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}
