# Plan-level checks of the module's rules with a mocked AWS provider: nothing is called, so they
# also cover what the AWS API emulator lacks (placement groups, EFA interfaces). Runs that apply
# (against the mocks) keep their own state, so each starts from nothing.
#
#   terraform init && terraform test

mock_provider "aws" {
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }

  mock_data "aws_ami" {
    defaults = { id = "ami-0123456789abcdef0" }
  }
}

variables {
  cluster_name   = "test"
  node_count     = 2
  instance_type  = "p5.48xlarge"
  vpc_id         = "vpc-0123456789abcdef0"
  subnet_id      = "subnet-0123456789abcdef0"
  allowed_cidrs  = ["203.0.113.7/32"]
  service_ports  = [8000]
  bucket_name    = "test-checkpoints"
  root_volume    = { size_gb = 500, type = "gp3" }
  ssh_public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3RrZXl0ZXN0a2V5dGVzdGtleXRlc3RrZXl0ZXN0 test"
  tags           = { "managed-by" = "rlinfra", "rlinfra:cluster" = "test", "rlinfra:profile" = "test" }
}

# --- two GPU nodes with the defaults ------------------------------------------------------------------

run "two_nodes_share_a_placement_group_and_follow_the_contract" {
  command   = apply
  state_key = "two_nodes"

  assert {
    condition     = length(aws_placement_group.this) == 1 && aws_placement_group.this[0].strategy == "cluster"
    error_message = "two nodes must get one cluster placement group"
  }

  assert {
    condition     = alltrue([for node in aws_instance.this : node.placement_group == aws_placement_group.this[0].id])
    error_message = "every node must be in the placement group"
  }

  assert {
    condition     = output.placement_group == aws_placement_group.this[0].name
    error_message = "the placement_group output must name the group"
  }

  assert {
    condition     = output.inventory.cluster_name == "test" && output.inventory.ssh_user == "ubuntu" && length(output.inventory.nodes) == 2
    error_message = "inventory must name the cluster, the ubuntu user and every node"
  }

  assert {
    condition = alltrue([
      for rank, node in output.inventory.nodes :
      node.rank == rank && node.name == "test-${rank}" && node.interface == "" &&
      node.instance_id == aws_instance.this[rank].id && node.instance_type == "p5.48xlarge" &&
      node.private_ip == aws_instance.this[rank].private_ip && node.ssh_host == aws_instance.this[rank].public_ip
    ])
    error_message = "each node must carry rank, name, addresses, instance id and type"
  }

  assert {
    condition     = length(aws_network_interface.efa) == 0 && length(aws_eip.efa) == 0
    error_message = "EFA interfaces are only made when efa = true"
  }
}

run "security_group_opens_members_ssh_and_service_ports_only" {
  command = plan

  assert {
    condition = anytrue([
      for rule in aws_security_group.this.ingress :
      rule.self == true && rule.protocol == "-1" && try(length(rule.cidr_blocks), 0) == 0
    ])
    error_message = "members must reach each other on all protocols and ports"
  }

  assert {
    condition = toset([
      for rule in aws_security_group.this.ingress : rule.from_port if rule.self != true
      ]) == toset([22, 8000]) && alltrue([
      for rule in aws_security_group.this.ingress :
      rule.self == true || (rule.protocol == "tcp" && rule.from_port == rule.to_port && rule.cidr_blocks == tolist(["203.0.113.7/32"]))
    ])
    error_message = "only SSH and the service ports may be open, each from the allowed range only"
  }
}

run "gpu_nodes_use_imdsv2_an_encrypted_root_the_deep_learning_image_and_a_bucket_only_role" {
  command = plan

  assert {
    condition = alltrue([
      for node in aws_instance.this :
      node.metadata_options[0].http_tokens == "required" &&
      node.root_block_device[0].encrypted &&
      node.root_block_device[0].volume_size == 500 &&
      node.root_block_device[0].volume_type == "gp3"
    ])
    error_message = "nodes must require IMDSv2 and boot from an encrypted root volume of the given size and type"
  }

  assert {
    condition = alltrue([
      for rank, node in aws_instance.this :
      node.tags["Name"] == "test-${rank}" && node.tags["rlinfra:cluster"] == "test" && node.tags["managed-by"] == "rlinfra"
    ])
    error_message = "nodes must be named <cluster>-<rank> and carry the deployment's tags"
  }

  assert {
    condition     = data.aws_ami.this[0].owners == tolist(["amazon"]) && anytrue([for f in data.aws_ami.this[0].filter : f.name == "name" && startswith(tolist(f.values)[0], "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)")])
    error_message = "GPU types must boot the AWS Deep Learning base GPU image for Ubuntu 22.04"
  }

  assert {
    condition = jsondecode(aws_iam_role_policy.bucket[0].policy).Statement == [
      {
        Sid      = "ListCheckpointBucket"
        Effect   = "Allow"
        Action   = ["s3:ListBucket"]
        Resource = ["arn:aws:s3:::test-checkpoints"]
      },
      {
        Sid      = "ReadWriteCheckpoints"
        Effect   = "Allow"
        Action   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
        Resource = ["arn:aws:s3:::test-checkpoints/*"]
      },
    ]
    error_message = "the role policy must grant list on the bucket and object access inside it, nothing else"
  }

  assert {
    condition     = jsondecode(aws_iam_role.this.assume_role_policy).Statement[0].Principal.Service == "ec2.amazonaws.com"
    error_message = "only EC2 may assume the nodes' role"
  }
}

# --- placement group, image and grant switches ----------------------------------------------------------

run "one_cpu_node_without_a_bucket" {
  command = plan

  variables {
    node_count    = 1
    instance_type = "r7i.8xlarge"
    bucket_name   = null
  }

  assert {
    condition     = length(aws_placement_group.this) == 0
    error_message = "a single node must not get a placement group"
  }

  assert {
    condition     = data.aws_ami.this[0].owners == tolist(["099720109477"])
    error_message = "CPU types must boot Canonical's Ubuntu 22.04"
  }

  assert {
    condition     = length(aws_iam_role_policy.bucket) == 0
    error_message = "without a bucket the role must grant nothing"
  }
}

run "placement_group_turned_off_and_a_given_image" {
  command = plan

  variables {
    placement_group = false
    ami             = "ami-0fedcba9876543210"
  }

  assert {
    condition     = length(aws_placement_group.this) == 0
    error_message = "placement_group = false must not make a placement group"
  }

  assert {
    condition     = length(data.aws_ami.this) == 0 && alltrue([for node in aws_instance.this : node.ami == "ami-0fedcba9876543210"])
    error_message = "a given AMI must be used as is, without a lookup"
  }
}

run "spot_nodes_without_outside_access" {
  command = plan

  variables {
    spot           = true
    spot_max_price = 30
    allowed_cidrs  = []
  }

  assert {
    condition = alltrue([
      for node in aws_instance.this :
      node.instance_market_options[0].market_type == "spot" &&
      node.instance_market_options[0].spot_options[0].max_price == "30" &&
      node.instance_market_options[0].spot_options[0].instance_interruption_behavior == "terminate" &&
      node.instance_market_options[0].spot_options[0].spot_instance_type == "one-time"
    ])
    error_message = "spot nodes must be one-time spot instances with the price cap"
  }

  assert {
    condition     = alltrue([for rule in aws_security_group.this.ingress : rule.self == true])
    error_message = "without allowed_cidrs only members may connect"
  }
}

# --- who may connect ------------------------------------------------------------------------------------

run "world_refused_without_allow_public" {
  command = plan

  variables {
    allowed_cidrs = ["203.0.113.7/32", "0.0.0.0/0"]
  }

  expect_failures = [var.allowed_cidrs]
}

run "world_allowed_with_allow_public" {
  command = plan

  variables {
    allowed_cidrs = ["0.0.0.0/0"]
    allow_public  = true
  }

  assert {
    condition     = anytrue([for rule in aws_security_group.this.ingress : try(contains(rule.cidr_blocks, "0.0.0.0/0"), false)])
    error_message = "allow_public = true must let 0.0.0.0/0 through"
  }
}

# --- node count -----------------------------------------------------------------------------------------

run "zero_nodes_refused" {
  command = plan

  variables {
    node_count = 0
  }

  expect_failures = [var.node_count]
}

run "sixty_five_nodes_refused" {
  command = plan

  variables {
    node_count = 65
  }

  expect_failures = [var.node_count]
}

# Each of these is refused by its own validation; one run checks them all.
run "other_bad_inputs_refused" {
  command = plan

  variables {
    node_count     = 1.5
    allowed_cidrs  = ["203.0.113.7"]
    service_ports  = [70000]
    spot_max_price = 30
    root_volume    = { size_gb = 10, type = "st1" }
  }

  expect_failures = [var.node_count, var.allowed_cidrs, var.service_ports, var.spot_max_price, var.root_volume]
}

# --- EFA ------------------------------------------------------------------------------------------------

run "efa_on_unsupported_type_refused" {
  command = plan

  variables {
    instance_type = "g6.xlarge"
    efa           = true
  }

  expect_failures = [var.efa]
}

run "efa_on_p5_gives_each_node_an_efa_interface" {
  command   = apply
  state_key = "efa"

  variables {
    efa = true
  }

  assert {
    condition     = length(aws_network_interface.efa) == 2 && alltrue([for eni in aws_network_interface.efa : eni.interface_type == "efa"])
    error_message = "each node must get one EFA interface"
  }

  assert {
    condition = alltrue([
      for rank, node in aws_instance.this :
      one(node.network_interface).network_interface_id == aws_network_interface.efa[rank].id && one(node.network_interface).device_index == 0
    ])
    error_message = "each node must boot with its EFA as the primary interface"
  }

  assert {
    condition     = alltrue([for eni in aws_network_interface.efa : eni.security_groups == toset([aws_security_group.this.id])])
    error_message = "the EFA interfaces must be in the cluster's security group"
  }

  assert {
    condition     = length(aws_eip.efa) == 2 && output.inventory.nodes[1].ssh_host == aws_eip.efa[1].public_ip
    error_message = "EFA nodes must be reached at their Elastic IPs"
  }
}
