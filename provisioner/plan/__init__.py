"""`provision plan`: size a training cluster from memory and communication, formulas shown."""
