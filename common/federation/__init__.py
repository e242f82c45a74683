"""What crosses the network and the files parties exchange: wire, signing, kits, dialing, studies, configs."""
