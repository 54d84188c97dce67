//! Well-known label, annotation and taint keys: one name for one thing across
//! the CRDs, the planner, the controller and the docs.

/// Something node labels can be looked up in: a label map, or a node's
/// labels kept in layers (the planner's candidates share their instance
/// type's labels rather than copy them per offering).
pub trait LabelLookup {
    /// The value of label `key`, if the node carries it.
    fn label(&self, key: &str) -> Option<&String>;
}

impl LabelLookup for std::collections::BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&String> {
        self.get(key)
    }
}

/// API group of our CRDs.
pub const GROUP: &str = "quartermaster.dev";

/// Node label: the NodePool that launched the node.
pub const NODEPOOL: &str = "quartermaster.dev/nodepool";
/// Node label: `spot` or `on-demand`.
pub const CAPACITY_TYPE: &str = "quartermaster.dev/capacity-type";
/// Node label: the EC2 capacity reservation (or Capacity Block) a
/// `reserved` node runs in, e.g. `cr-0123456789abcdef0`.
pub const CAPACITY_RESERVATION_ID: &str = "quartermaster.dev/capacity-reservation-id";
/// Node label: the kind of reservation a `reserved` node runs in
/// (`capacity-reservation` or `capacity-block`).
pub const CAPACITY_RESERVATION_KIND: &str = "quartermaster.dev/capacity-reservation-kind";
/// Node label: the Elastic Fabric Adapter interfaces the node is launched
/// with (one per network card, the first also carrying ENA), set when a pod
/// of its claim requests `vpc.amazonaws.com/efa` on an EFA instance type.
pub const EFA_INTERFACES: &str = "quartermaster.dev/efa-interfaces";
/// Node label: `"true"` on a node launched to serve DRA resource claims:
/// it offers its devices through the DRA drivers its pool runs, not the
/// device plugin (the drivers' DaemonSets select it; the device plugin's
/// should not).
pub const DRA: &str = "quartermaster.dev/dra";
/// NodeClaim annotation: the DRA drivers (comma-separated) whose devices
/// the claims of its pods take: the node is Initialized only once each has
/// published ResourceSlices for it.
pub const DRA_DRIVERS: &str = "quartermaster.dev/dra-drivers";
/// Node label: instance family, e.g. `p5`.
pub const INSTANCE_FAMILY: &str = "quartermaster.dev/instance-family";
/// Node label: short GPU name (`t4`, `a10g`, `l4`, `l40s`, `a100`, `h100`, `h200`).
pub const GPU_NAME: &str = "quartermaster.dev/gpu-name";
/// Node label: memory of one GPU in GiB (integer, so `Gt`/`Lt` apply).
pub const GPU_MEMORY_GIB: &str = "quartermaster.dev/gpu-memory-gib";
/// Node label: GPUs on the node (integer).
pub const GPU_COUNT: &str = "quartermaster.dev/gpu-count";
/// Node label: how many network layers EC2 reports for the instance type
/// (integer, 3 or 4; absent for types without a reported topology): a
/// node of such a type carries that many `network-node-layer` labels.
pub const NETWORK_LAYERS: &str = "quartermaster.dev/network-layers";
/// Node and NodeClaim label: `true` when the node was launched into its
/// pool's cluster placement group of its zone because its gang must share
/// one network block (EFA nodes always are, without the label).
pub const CLUSTER_PLACEMENT: &str = "quartermaster.dev/cluster-placement";
/// Node label: Neuron device model (`inferentia2`, `trainium`, `trainium2`).
pub const NEURON_NAME: &str = "quartermaster.dev/neuron-name";
/// Node label: Neuron devices on the node (integer).
pub const NEURON_COUNT: &str = "quartermaster.dev/neuron-count";

/// Karpenter's API group: its well-known node labels live under it.
pub const KARPENTER_GROUP: &str = "karpenter.sh";
/// Karpenter's AWS provider's group: its instance-type labels live under it.
pub const KARPENTER_AWS_GROUP: &str = "karpenter.k8s.aws";
/// Karpenter's label of the NodePool that launched the node; ours carry
/// it beside [`NODEPOOL`], with the same value.
pub const KARPENTER_NODEPOOL: &str = "karpenter.sh/nodepool";
/// Karpenter's capacity-type label (`spot`, `on-demand`, `reserved`), set
/// beside [`CAPACITY_TYPE`] with the same value.
pub const KARPENTER_CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Karpenter: instance family (`p5`), as [`INSTANCE_FAMILY`].
pub const KARPENTER_INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// Karpenter: instance category, the letters the family starts with
/// (`g`, `p`, `trn`, `inf`, `c`).
pub const KARPENTER_INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
/// Karpenter: instance generation, the digits after the category (integer).
pub const KARPENTER_INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
/// Karpenter: instance size, the part of the name after the dot (`24xlarge`).
pub const KARPENTER_INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
/// Karpenter: vCPUs (integer).
pub const KARPENTER_INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
/// Karpenter: CPU manufacturer, lower case (`intel`, `amd`, `aws`).
pub const KARPENTER_INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
/// Karpenter: hypervisor (`nitro`, `xen`), absent on bare metal.
pub const KARPENTER_INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
/// Karpenter: memory in MiB (integer).
pub const KARPENTER_INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
/// Karpenter: GPU name, lower case with dashes for spaces (`a10g`, `h100`).
pub const KARPENTER_INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
/// Karpenter: GPU manufacturer, lower case (`nvidia`).
pub const KARPENTER_INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// Karpenter: GPUs on the node (integer).
pub const KARPENTER_INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
/// Karpenter: memory of one GPU in MiB (integer).
pub const KARPENTER_INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
/// Karpenter: accelerator (Neuron device) name, lower case (`inferentia2`,
/// `trainium`, `trainium2`).
pub const KARPENTER_INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
/// Karpenter: accelerator manufacturer (`aws` for Neuron devices).
pub const KARPENTER_INSTANCE_ACCELERATOR_MANUFACTURER: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
/// Karpenter: accelerators (Neuron devices) on the node (integer).
pub const KARPENTER_INSTANCE_ACCELERATOR_COUNT: &str =
    "karpenter.k8s.aws/instance-accelerator-count";
/// Karpenter: local NVMe instance storage in GB (integer), on types that have it.
pub const KARPENTER_INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
/// Karpenter: baseline network bandwidth in Mbps (integer), where known.
pub const KARPENTER_INSTANCE_NETWORK_BANDWIDTH: &str =
    "karpenter.k8s.aws/instance-network-bandwidth";

/// GPU feature discovery label: GPU product name.
pub const GFD_PRODUCT: &str = "nvidia.com/gpu.product";
/// GPU feature discovery label: GPUs on the node.
pub const GFD_COUNT: &str = "nvidia.com/gpu.count";
/// GPU feature discovery label: memory of one GPU in MiB.
pub const GFD_MEMORY: &str = "nvidia.com/gpu.memory";

/// Well-known Kubernetes label: instance type.
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// Well-known Kubernetes label: zone.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// EKS label: zone ID (the same in every account).
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
/// Well-known Kubernetes label: region.
pub const REGION: &str = "topology.kubernetes.io/region";
/// Prefix of the EKS labels for an instance's place in the EC2 network
/// (`DescribeInstanceTopology`'s node set, top layer first):
/// `topology.k8s.aws/network-node-layer-1` to `-4`.
pub const NETWORK_NODE_LAYER_PREFIX: &str = "topology.k8s.aws/network-node-layer-";

/// The EKS label of network layer `n` (1 is the top, the broadest).
pub fn network_node_layer(n: usize) -> String {
    format!("{NETWORK_NODE_LAYER_PREFIX}{n}")
}
/// Well-known Kubernetes label: CPU architecture (`amd64`, `arm64`).
pub const ARCH: &str = "kubernetes.io/arch";
/// Well-known Kubernetes label: operating system.
pub const OS: &str = "kubernetes.io/os";
/// Well-known Kubernetes label: node name.
pub const HOSTNAME: &str = "kubernetes.io/hostname";

/// Extended resource: whole NVIDIA GPUs.
pub const RESOURCE_GPU: &str = "nvidia.com/gpu";
/// Extended resource: time-sliced shares of NVIDIA GPUs, as the device
/// plugin advertises them with `renameByDefault: true`, so that a pod asking
/// for whole GPUs (`nvidia.com/gpu`) never lands on a shared one.
pub const RESOURCE_GPU_SHARED: &str = "nvidia.com/gpu.shared";
/// Prefix of NVIDIA MIG resources, e.g. `nvidia.com/mig-1g.10gb`.
pub const RESOURCE_MIG_PREFIX: &str = "nvidia.com/mig-";
/// Extended resource: Neuron devices.
pub const RESOURCE_NEURON: &str = "aws.amazon.com/neuron";
/// Extended resource: NeuronCores.
pub const RESOURCE_NEURONCORE: &str = "aws.amazon.com/neuroncore";
/// Extended resource: EFA interfaces.
pub const RESOURCE_EFA: &str = "vpc.amazonaws.com/efa";

/// Taint key put on GPU nodes (`nvidia.com/gpu:NoSchedule`).
pub const TAINT_GPU: &str = "nvidia.com/gpu";
/// Taint key put on Neuron nodes (`aws.amazon.com/neuron:NoSchedule`).
pub const TAINT_NEURON: &str = "aws.amazon.com/neuron";
/// Startup taint held until the node is registered and initialized.
pub const TAINT_UNREGISTERED: &str = "quartermaster.dev/unregistered";
/// Taint put on a node that is being disrupted (interrupted or consolidated).
pub const TAINT_DISRUPTED: &str = "quartermaster.dev/disrupted";

/// NodeClaim annotation: the hash of its pool's template when it was
/// created (`core::drift::pool_template_hash`), for drift.
pub const NODEPOOL_HASH: &str = "quartermaster.dev/nodepool-hash";
/// NodeClaim annotation: the version of the drift hashes it carries
/// (`core::drift::HASH_VERSION`).
pub const DRIFT_HASH_VERSION: &str = "quartermaster.dev/drift-hash-version";

/// Pod/node annotation: never disrupt voluntarily.
pub const DO_NOT_DISRUPT: &str = "quartermaster.dev/do-not-disrupt";
/// Karpenter's spelling of [`DO_NOT_DISRUPT`], honoured the same way so
/// that workloads moving from Karpenter keep their protection.
pub const KARPENTER_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";

/// Whether annotations ask for no voluntary disruption: ours or Karpenter's
/// do-not-disrupt set to `"true"`.
pub fn do_not_disrupt(annotations: &std::collections::BTreeMap<String, String>) -> bool {
    [DO_NOT_DISRUPT, KARPENTER_DO_NOT_DISRUPT]
        .iter()
        .any(|k| annotations.get(*k).map(String::as_str) == Some("true"))
}

/// Node (or NodeClaim) annotation: repair leaves the node alone, whatever
/// its conditions say (`docs/repair.md`).
pub const DO_NOT_REPAIR: &str = "quartermaster.dev/do-not-repair";

/// Whether annotations keep repair away: [`DO_NOT_REPAIR`] set to `"true"`.
pub fn do_not_repair(annotations: &std::collections::BTreeMap<String, String>) -> bool {
    annotations.get(DO_NOT_REPAIR).map(String::as_str) == Some("true")
}

/// Pod annotation we set: a checkpoint is requested by this RFC 3339 deadline.
pub const CHECKPOINT_REQUESTED: &str = "quartermaster.dev/checkpoint-requested";
/// Pod annotation the workload sets: its checkpoint is complete.
pub const CHECKPOINT_COMPLETED: &str = "quartermaster.dev/checkpoint-completed";
/// Pod annotation: the pod opts in to checkpoint signals.
pub const CHECKPOINT_ENABLED: &str = "quartermaster.dev/checkpoint";
/// Pod annotation: the pod's own checkpoint hook, `PORT/PATH` (overrides the pool's).
pub const CHECKPOINT_HOOK: &str = "quartermaster.dev/checkpoint-hook";
/// Pod annotation: seconds between the pod's checkpoints (planner risk model).
pub const CHECKPOINT_INTERVAL: &str = "quartermaster.dev/checkpoint-interval";
/// Pod annotation: expected run time of the pod (planner risk model).
pub const EXPECTED_RUNTIME: &str = "quartermaster.dev/expected-runtime";
/// Pod annotation: how long the pod takes to write one checkpoint (Go
/// duration). A checkpoint request that cannot finish before its deadline
/// is not made, and the planner prices the work it would not save.
pub const CHECKPOINT_DURATION: &str = "quartermaster.dev/checkpoint-duration";
/// Pod annotation: seconds one requested checkpoint pauses training (a
/// duration such as `10s`; the default assumes asynchronous checkpoints).
pub const CHECKPOINT_PAUSE: &str = "quartermaster.dev/checkpoint-pause";
/// Pod annotation, `"true"` (the default) or `"false"`: whether an
/// interruption loses the pod's work since its last checkpoint (the
/// planner's risk model). A serving replica that holds no work of its own
/// says `"false"`: an interruption costs it only the time it is down.
pub const HOLDS_WORK: &str = "quartermaster.dev/holds-work";
/// Pod annotation: when the pod's work must be done (RFC 3339). Spot is not
/// used for it once its slack no longer covers spot's expected delays.
pub const DEADLINE: &str = "quartermaster.dev/deadline";
/// Pod annotation: our own gang name.
pub const POD_GROUP: &str = "quartermaster.dev/pod-group";
/// Pod annotation: our own gang size (pods that must start together).
pub const POD_GROUP_SIZE: &str = "quartermaster.dev/pod-group-size";
/// Volcano's gang annotation (`minMember` comes from its PodGroup).
pub const VOLCANO_GROUP: &str = "scheduling.k8s.io/group-name";
/// Kueue's pod-group label.
pub const KUEUE_GROUP: &str = "kueue.x-k8s.io/pod-group-name";
/// Kueue's pod-group size annotation.
pub const KUEUE_GROUP_TOTAL: &str = "kueue.x-k8s.io/pod-group-total-count";

/// Cloud resource tag: the cluster that owns an instance, volume, fleet or
/// launch template (value: the cluster name). Garbage collection and the IAM
/// policy's conditions key on it.
pub const TAG_CLUSTER: &str = "quartermaster.dev/cluster";
/// Cloud resource tag: the NodeClaim an instance was launched for.
pub const TAG_NODECLAIM: &str = "quartermaster.dev/nodeclaim";
/// Cloud resource tag: the USD per hour expected at launch, so that a
/// restarted controller still knows what an instance costs.
pub const TAG_PRICE: &str = "quartermaster.dev/price-per-hour";

/// Finalizer on NodeClaims: the instance is terminated before the claim goes.
pub const FINALIZER: &str = "quartermaster.dev/termination";
