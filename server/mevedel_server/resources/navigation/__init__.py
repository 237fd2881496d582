"""What editors ask of addresses besides operations: completion of a
partial address (``completion``, kept fast by ``directory_index``) and a
description of one for hover and go-to-definition (``describe``)."""
