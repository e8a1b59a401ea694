"""Running Ansible: the playbook runner, its run records, progress, redaction, the inventory
lock and the ledger read back from the records."""
