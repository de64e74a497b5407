"""Profile sections that belong to one cloud: the ssh cloud's hosts (``ssh:``) and the Ansible
inventory files they may come from. The profile schema (``rlinfra.profile``) composes them."""
