"""Registration with the name servers (``namesrv_client`` drives ``core.namesrv_registration``)."""
