# The local cloud: one Linux bridge per cluster and, per node, a network namespace with a veth
# pair, its own /opt and /tmp, and an sshd. Only built-in resources; everything is done by
# scripts/host.sh, run by local-exec. Destroy-time provisioners may read only `self`, so each
# resource keeps what its destroy needs in `input`.

locals {
  # Linux limits link names to 15 characters: "rlb-" + 8 hex for the bridge, "rlv" + 8 hex + rank
  # for the host side of each veth pair. MACs are fixed and locally administered: 02:<id>:01 for
  # the bridge, 02:<id>:<10+rank> for each eth0, so a host made again keeps its MAC.
  id           = substr(sha1(var.cluster_name), 0, 8)
  bridge       = "rlb-${local.id}"
  mac_prefix   = join(":", concat(["02"], regexall("..", local.id)))
  bridge_mac   = "${local.mac_prefix}:01"
  prefix_len   = split("/", var.subnet_cidr)[1]
  gateway      = cidrhost(var.subnet_cidr, 1)
  gateway_cidr = "${local.gateway}/${local.prefix_len}"
  state_dir    = trimsuffix(var.state_dir, "/")
  script       = "${path.module}/scripts/host.sh"

  nodes = [
    for rank in range(var.node_count) : {
      name  = "${var.cluster_name}-${rank}"
      rank  = rank
      ip    = cidrhost(var.subnet_cidr, 10 + rank)
      mac   = format("%s:%02x", local.mac_prefix, 10 + rank)
      netns = "rl-${local.id}-${rank}"
      veth  = "rlv${local.id}${rank}"
      dir   = "${local.state_dir}/${var.cluster_name}-${rank}"
    }
  ]
}

resource "terraform_data" "bridge" {
  triggers_replace = {
    bridge       = local.bridge
    bridge_mac   = local.bridge_mac
    gateway_cidr = local.gateway_cidr
  }

  input = {
    cluster      = var.cluster_name
    bridge       = local.bridge
    bridge_mac   = local.bridge_mac
    gateway      = local.gateway
    gateway_cidr = local.gateway_cidr
    subnet_cidr  = var.subnet_cidr
    script       = local.script
  }

  provisioner "local-exec" {
    interpreter = ["bash", self.input.script]
    command     = "bridge-create"
    environment = {
      RLINFRA_CLUSTER      = self.input.cluster
      RLINFRA_BRIDGE       = self.input.bridge
      RLINFRA_BRIDGE_MAC   = self.input.bridge_mac
      RLINFRA_GATEWAY_CIDR = self.input.gateway_cidr
      RLINFRA_SUBNET_CIDR  = self.input.subnet_cidr
    }
  }

  provisioner "local-exec" {
    when        = destroy
    interpreter = ["bash", self.input.script]
    command     = "bridge-destroy"
    environment = {
      RLINFRA_BRIDGE = self.input.bridge
    }
  }
}

resource "terraform_data" "node" {
  count = var.node_count

  # Any change to what defines a host (including the authorized key) replaces it: destroy, then
  # create. The script path is left out so that moving the module folder does not.
  triggers_replace = merge(local.nodes[count.index], {
    bridge             = terraform_data.bridge.output.bridge
    gateway            = terraform_data.bridge.output.gateway
    prefix_len         = local.prefix_len
    ssh_authorized_key = trimspace(var.ssh_authorized_key)
  })

  input = merge(local.nodes[count.index], {
    cluster            = var.cluster_name
    bridge             = terraform_data.bridge.output.bridge
    gateway            = terraform_data.bridge.output.gateway
    prefix_len         = local.prefix_len
    ssh_authorized_key = trimspace(var.ssh_authorized_key)
    script             = local.script
    # Read at create only: a new size applies to nodes made from then on.
    disk_size = var.node_disk_size
  })

  provisioner "local-exec" {
    interpreter = ["bash", self.input.script]
    command     = "node-create"
    environment = {
      RLINFRA_CLUSTER        = self.input.cluster
      RLINFRA_NODE_NAME      = self.input.name
      RLINFRA_NETNS          = self.input.netns
      RLINFRA_VETH           = self.input.veth
      RLINFRA_BRIDGE         = self.input.bridge
      RLINFRA_NODE_IP        = self.input.ip
      RLINFRA_NODE_MAC       = self.input.mac
      RLINFRA_PREFIX_LEN     = self.input.prefix_len
      RLINFRA_GATEWAY        = self.input.gateway
      RLINFRA_NODE_DIR       = self.input.dir
      RLINFRA_AUTHORIZED_KEY = self.input.ssh_authorized_key
      RLINFRA_NODE_DISK_SIZE = self.input.disk_size
    }
  }

  provisioner "local-exec" {
    when        = destroy
    interpreter = ["bash", self.input.script]
    command     = "node-destroy"
    environment = {
      RLINFRA_NETNS    = self.input.netns
      RLINFRA_VETH     = self.input.veth
      RLINFRA_NODE_DIR = self.input.dir
    }
  }
}
