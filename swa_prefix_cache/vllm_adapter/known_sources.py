"""The known variants of each binding (swa_prefix_cache/vllm_adapter/fingerprint.py).

Written by scripts/fingerprint_releases.py from the PyPI wheels of the
releases each binding was checked on; do not edit by hand. A variant is one
set of source fingerprints; ``releases`` are the checked releases that have
it; ``semantics`` names what the patch does differently there ("" for
nothing).
"""

VARIANTS: dict[str, list[dict]] = {
    "sliding_window": [
        {
            "name": "0.28.0-0.29.0",
            "releases": ("0.28.0", "0.29.0"),
            "semantics": "block_aligned_only",
            "digests": {
                "SlidingWindowManager.find_longest_cache_hit":
                    "7beb1e3cfaa4ed68b8d90ec865df00aedf9fe98d5cecfb65cfb0562edfe729c5",
                "SlidingWindowManager._contiguous_blocks_for_hit":
                    "eea414ae0d39a09f4b3a45ae7e5b05c46537a8bb9888f914196017a8dcb5cdc5",
                "BlockPool.get_cached_block":
                    "f9672506e4244cbcd92702318a9ae1e4d0dd91403521e0cb38e5828c9ea3c543",
                "resolve_block_hashes":
                    "82dc8308cbdfee2da091ef92284bc8c1d4662042170655d2425ec7ea7888f10b",
                "cdiv":
                    "78d49c011ff33d58c5b7d81dea47f07f77f701753d419cdf1fd0796963551426",
            },
        },
        {
            "name": "0.30.0-0.34.0",
            "releases": ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"),
            "semantics": "",
            "digests": {
                "SlidingWindowManager.find_longest_cache_hit":
                    "9f8085983e4e2ad9b10e6e95e81831d2a1beb3b889dc5b1644c22d71caf9cc84",
                "SlidingWindowManager._contiguous_blocks_for_hit":
                    "eea414ae0d39a09f4b3a45ae7e5b05c46537a8bb9888f914196017a8dcb5cdc5",
                "BlockPool.get_cached_block":
                    "f9672506e4244cbcd92702318a9ae1e4d0dd91403521e0cb38e5828c9ea3c543",
                "resolve_block_hashes":
                    "82dc8308cbdfee2da091ef92284bc8c1d4662042170655d2425ec7ea7888f10b",
                "cdiv":
                    "78d49c011ff33d58c5b7d81dea47f07f77f701753d419cdf1fd0796963551426",
            },
        },
    ],
    "pool_read": [
        {
            "name": "0.28.0-0.33.0",
            "releases": ("0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"),
            "semantics": "",
            "digests": {
                "BlockPool.get_cached_block":
                    "f9672506e4244cbcd92702318a9ae1e4d0dd91403521e0cb38e5828c9ea3c543",
                "BlockHashToBlockMap.__init__":
                    "2742fe9946b6f8436ee6e2366f2ee13ab4addecbceac9c36d8dee08d8c570c94",
                "BlockHashToBlockMap.get_one_block":
                    "f7ac7ed2fbd7e9e74e7cd9e4405079e7e5af5a5b7aaee63d939b55474b2f7258",
                "make_block_hash_with_group_id":
                    "d51da817a4ac06b764cb7e427a00e5789a5a85d57e96fa457d5527f3620fabfe",
                "BlockHashListWithBlockSize.__init__":
                    "f999f8b7ca88baa9ffef05e30a11d6fbba6b4d70163c0014f96e547a107a2e4a",
                "BlockHashListWithBlockSize.__len__":
                    "c5bf8290ee2a017b0c7dc2b7543814d94feef74575f1916c7f6ae65bf54052c1",
                "BlockHashListWithBlockSize._get_value_at":
                    "108110e08c3b08ff0a4bb321bee27a3d9e4d971a845259d6ddd440877d116311",
            },
        },
        {
            "name": "0.34.0",
            "releases": ("0.34.0",),
            "semantics": "block_ids",
            "digests": {
                "BlockPool.get_cached_block":
                    "f9672506e4244cbcd92702318a9ae1e4d0dd91403521e0cb38e5828c9ea3c543",
                "BlockHashToBlockMap.__init__":
                    "cc9466e3a3d1d358e49a7911625d0476f6077de68465dc0638ffd46d2bba4d21",
                "BlockHashToBlockMap.get_one_block":
                    "95aaec9d5a74f65cbb04ba8408a50335dd0f39125ddf2e3bea62d0a8b9541667",
                "make_block_hash_with_group_id":
                    "d51da817a4ac06b764cb7e427a00e5789a5a85d57e96fa457d5527f3620fabfe",
                "BlockHashListWithBlockSize.__init__":
                    "f999f8b7ca88baa9ffef05e30a11d6fbba6b4d70163c0014f96e547a107a2e4a",
                "BlockHashListWithBlockSize.__len__":
                    "c5bf8290ee2a017b0c7dc2b7543814d94feef74575f1916c7f6ae65bf54052c1",
                "BlockHashListWithBlockSize._get_value_at":
                    "108110e08c3b08ff0a4bb321bee27a3d9e4d971a845259d6ddd440877d116311",
            },
        },
    ],
    "full_attention": [
        {
            "name": "0.28.0-0.34.0",
            "releases": ("0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"),
            "semantics": "",
            "digests": {
                "FullAttentionManager.find_longest_cache_hit":
                    "8df01074d130e489fc4ebe43eb22ec5b179364193e7aa2c8174bae3121af40d0",
                "BlockPool.get_cached_block":
                    "f9672506e4244cbcd92702318a9ae1e4d0dd91403521e0cb38e5828c9ea3c543",
                "resolve_block_hashes":
                    "82dc8308cbdfee2da091ef92284bc8c1d4662042170655d2425ec7ea7888f10b",
                "BlockHashListWithBlockSize.__init__":
                    "f999f8b7ca88baa9ffef05e30a11d6fbba6b4d70163c0014f96e547a107a2e4a",
                "BlockHashListWithBlockSize.__iter__":
                    "7903125ea6c04dccca1630af1d74d5c444c52b2791d36b3d9e451626a1cf7f4e",
                "BlockHashListWithBlockSize.__getitem__":
                    "c447ab56c7968c9d0cb45d736b65d122fd8ce3cc1d68a01056372b0f1b8c95d6",
                "cdiv":
                    "78d49c011ff33d58c5b7d81dea47f07f77f701753d419cdf1fd0796963551426",
            },
        },
    ],
    "offload_lookup": [
        {
            "name": "0.30.0-0.34.0",
            "releases": ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"),
            "semantics": "",
            "digests": {
                "OffloadingConnectorScheduler._sliding_window_lookup":
                    "3a681ea0a5af5de2dc767166e7987de9e5d85595df25a6073ca82ee02b900d5f",
                "CPUOffloadingManager.lookup":
                    "a103e21699ac0bfb9329babb4126d190ba29a01f095c513ceea864e83a84a6a9",
                "LRUCachePolicy.get":
                    "0e70654939b5fb27bd760a4a41c66710ee4229f0b9cac23aa2349b09f901ee31",
                "ARCCachePolicy.get":
                    "6e70126ebc549ebe5567c9782efdec14b8aeb6dcb71c19c56b4bd90984c4ce39",
                "ChunkStatus":
                    "ccef8781ac3b08e590251c6681afaa1cc8cf48c4707e077aff9fb7d232f309ba",
                "LookupResult":
                    "34921795103172c6e8796705e8e7d2712226928f9cda411e47fbbf46678487dc",
            },
        },
    ],
    "offload_prefix": [
        {
            "name": "0.33.0",
            "releases": ("0.33.0",),
            "semantics": "",
            "digests": {
                "OffloadingConnectorScheduler._maximal_prefix_lookup":
                    "2867f1ca14a6195dc461bccc08dc0f578727d68ac49ac474e0904beb3475e2f1",
                "OffloadingEventsTracker.__init__":
                    "7d55a5a71d25caf3966b680d227bbcdd39b08b72c75a9b05492a84352d1177a9",
                "OffloadingEventsTracker.record_lookup":
                    "4924f788b055eff86106c5178a2c9fce6eb433405a3378122f2c516e76fa9883",
                "CPUOffloadingManager.lookup":
                    "a103e21699ac0bfb9329babb4126d190ba29a01f095c513ceea864e83a84a6a9",
                "LRUCachePolicy.get":
                    "0e70654939b5fb27bd760a4a41c66710ee4229f0b9cac23aa2349b09f901ee31",
                "ARCCachePolicy.get":
                    "6e70126ebc549ebe5567c9782efdec14b8aeb6dcb71c19c56b4bd90984c4ce39",
                "ChunkStatus":
                    "ccef8781ac3b08e590251c6681afaa1cc8cf48c4707e077aff9fb7d232f309ba",
                "LookupResult":
                    "34921795103172c6e8796705e8e7d2712226928f9cda411e47fbbf46678487dc",
                "CPUOffloadingManager":
                    "40569ffe270b996ad5e4321e3570c3bdea38af4e16660f84ff4ec3e7a3015c28",
                "LRUCachePolicy":
                    "82cff8d626acb6124441afee589ba7298c5490fe0641be4d4c1bc2a954415383",
                "ARCCachePolicy":
                    "ae72261a486c6ca3239aa8a5d6d5fe2b6cfce529310509dff8044ec28ac5849d",
            },
        },
        {
            "name": "0.34.0",
            "releases": ("0.34.0",),
            "semantics": "",
            "digests": {
                "OffloadingConnectorScheduler._maximal_prefix_lookup":
                    "2867f1ca14a6195dc461bccc08dc0f578727d68ac49ac474e0904beb3475e2f1",
                "OffloadingEventsTracker.__init__":
                    "62c23b907fa27ca544876a9108395f3b47a7bfbaf2c8df75715f544ae46fea87",
                "OffloadingEventsTracker.record_lookup":
                    "cc18d91c846c242f68d67979aacb8be8c3bd7f0f1714f03751d110a99f77c44f",
                "CPUOffloadingManager.lookup":
                    "a103e21699ac0bfb9329babb4126d190ba29a01f095c513ceea864e83a84a6a9",
                "LRUCachePolicy.get":
                    "0e70654939b5fb27bd760a4a41c66710ee4229f0b9cac23aa2349b09f901ee31",
                "ARCCachePolicy.get":
                    "6e70126ebc549ebe5567c9782efdec14b8aeb6dcb71c19c56b4bd90984c4ce39",
                "ChunkStatus":
                    "ccef8781ac3b08e590251c6681afaa1cc8cf48c4707e077aff9fb7d232f309ba",
                "LookupResult":
                    "34921795103172c6e8796705e8e7d2712226928f9cda411e47fbbf46678487dc",
                "CPUOffloadingManager":
                    "ba52ba006df3d8337c0f5fb22398366f0b86460e137ad9fee5448d31f4162d14",
                "LRUCachePolicy":
                    "d605d03b4120e05fcb15f4ad32853f39fc126ce13f9edcafc0762f00d2f31ad2",
                "ARCCachePolicy":
                    "c11d70b63e6fd9956ee8aeb82b2293c55cee06372b3ddc62180abe5a56072367",
            },
        },
    ],
    "offload_keys": [
        {
            "name": "0.31.0-0.33.0",
            "releases": ("0.31.0", "0.32.0", "0.33.0"),
            "semantics": "",
            "digests": {
                "RequestOffloadState.update_offload_keys":
                    "fdbad4f1e869fb7f8b381a532e7712e8f342a666136e5d3667ecbd6660b2cee2",
                "make_offload_key":
                    "7b36cb17c283bf237a43d8d51b1fc6b9d464f81f24ae87f266939e40baf720bf",
                "ReqContext":
                    "81b4f505ba941290c54c1d61276f34dc38fd803568467df8b57c54d9d1583cf4",
            },
        },
        {
            "name": "0.34.0",
            "releases": ("0.34.0",),
            "semantics": "",
            "digests": {
                "RequestOffloadState.update_offload_keys":
                    "c13f786cb1fbc631295fad4005ae05e5576a57445653c4f6e1e622e7694dc106",
                "make_offload_key":
                    "7b36cb17c283bf237a43d8d51b1fc6b9d464f81f24ae87f266939e40baf720bf",
                "ReqContext":
                    "0aa18f03fa75d7103a8034a6c7e51b5c5f6b1f2acd56d9cc236298aa87417b89",
            },
        },
    ],
    "offload_filter": [
        {
            "name": "0.33.0",
            "releases": ("0.33.0",),
            "semantics": "",
            "digests": {
                "OffloadingConnectorScheduler._reachable_store_block_mask":
                    "3c7748f00e6610087b2b7bbc2505a48d29cb2d31b576ff020aeca8c6790fc028",
                "OffloadingConnectorScheduler._build_store_jobs":
                    "366947dae0e1e597d6cb0716fc10bed573ba91831721eeabe9475f37e97968b4",
                "OffloadingConnectorScheduler._lookup_complete_chunks":
                    "1921b739e3e2e1d649fd2e23cf825d3bed21dd1863104389ea323cfb891f1ca9",
                "OffloadingConnectorScheduler._sliding_window_lookup":
                    "3a681ea0a5af5de2dc767166e7987de9e5d85595df25a6073ca82ee02b900d5f",
                "OffloadingConnectorScheduler._maximal_prefix_lookup":
                    "2867f1ca14a6195dc461bccc08dc0f578727d68ac49ac474e0904beb3475e2f1",
                "OffloadingConnectorScheduler._lookup":
                    "878cb781caba043f1bf816e771c7a98c6ea4f7637a35c3cf7b514c728d5d0198",
                "OffloadingConnectorScheduler.__init__":
                    "b7603b1ee4c4978fc559879f47b4a93f2d11eca155a0db3f6085b353186a1de6",
                "GroupOffloadConfig.load_window_size_in_chunks":
                    "29ae7785fbbde2bd6f0b9ff69b3bca074675196e8b0f8c21fc63538ca801f511",
                "SchedulerOffloadConfig.from_spec":
                    "9eb4cc1be3cd8178cd4bec73eb7e2e0f662ea3f50fa63e90a8c14c420017fbdc",
                "RequestOffloadState.update_offload_keys":
                    "fdbad4f1e869fb7f8b381a532e7712e8f342a666136e5d3667ecbd6660b2cee2",
                "RequestOffloadState.storable_chunks":
                    "3d02e1645d00868d4f82019be9a64a9dd594e59a5c14ed499b3fbe70eeac6629",
                "get_sliding_window_size_in_chunks":
                    "f6282cd054fbccf5548836d29bfdfb9afe670b3c804d0f2afb9b312b6aa88967",
                "cdiv":
                    "78d49c011ff33d58c5b7d81dea47f07f77f701753d419cdf1fd0796963551426",
            },
        },
        {
            "name": "0.34.0",
            "releases": ("0.34.0",),
            "semantics": "junction_pinned",
            "digests": {
                "OffloadingConnectorScheduler._reachable_store_block_mask":
                    "906be8378991e4e03b29c17a6a5cc1c92a15ac2f4c5a381c102a61ad63bc52d0",
                "OffloadingConnectorScheduler._build_store_jobs":
                    "715cd9e54716fa4ce22b54282a69990ab1b7c50309db87beadcd84e4dd4b8480",
                "OffloadingConnectorScheduler._lookup_complete_chunks":
                    "40253d3e6d7116a024f158df311103ead7e9caf9cbed74bcc57e391348c54b57",
                "OffloadingConnectorScheduler._sliding_window_lookup":
                    "3a681ea0a5af5de2dc767166e7987de9e5d85595df25a6073ca82ee02b900d5f",
                "OffloadingConnectorScheduler._maximal_prefix_lookup":
                    "2867f1ca14a6195dc461bccc08dc0f578727d68ac49ac474e0904beb3475e2f1",
                "OffloadingConnectorScheduler._lookup":
                    "f2ea1ff5e35366fe1dbb4724991789511de4beaa9d1b7d16e4eb75262ef2e789",
                "OffloadingConnectorScheduler.__init__":
                    "6925ba5f34f1d9751dbbb153147c5c8f50463f2ba9e4466bbc1f6de2705dd09d",
                "GroupOffloadConfig.load_window_size_in_chunks":
                    "29ae7785fbbde2bd6f0b9ff69b3bca074675196e8b0f8c21fc63538ca801f511",
                "SchedulerOffloadConfig.from_spec":
                    "3ac1862f9856d60f34e82197e85288538d3318a594c521df7b589aca22abeb77",
                "RequestOffloadState.update_offload_keys":
                    "c13f786cb1fbc631295fad4005ae05e5576a57445653c4f6e1e622e7694dc106",
                "RequestOffloadState.storable_chunks":
                    "2729a06116d8495cbe3604194b9321221a12b2188968e806b14e7b60bb05c650",
                "get_sliding_window_size_in_chunks":
                    "f6282cd054fbccf5548836d29bfdfb9afe670b3c804d0f2afb9b312b6aa88967",
                "cdiv":
                    "78d49c011ff33d58c5b7d81dea47f07f77f701753d419cdf1fd0796963551426",
            },
        },
    ],
    "dp_routing": [
        {
            "name": "0.32.0",
            "releases": ("0.32.0",),
            "semantics": "",
            "digests": {
                "DPLBAsyncMPClient.get_core_engine_for_request":
                    "c70c83b1b973eb2feb27b30205da8f959788fabc6f26d0156a151c34c9ca0895",
                "DPLBAsyncMPClient.process_engine_outputs":
                    "e24df2c7e86775c7878b6fc165cab95f12ae165ebe54aaf8eff5241cdf191722",
                "DPLBAsyncMPClient.__init__":
                    "705e0d41edd321ccd2b4fd22e4b197b50c4efeabe5982f1a95cd2e8d394c81c5",
            },
        },
        {
            "name": "0.33.0-0.34.0",
            "releases": ("0.33.0", "0.34.0"),
            "semantics": "",
            "digests": {
                "DPLBAsyncMPClient.get_core_engine_for_request":
                    "95c12723311272e2909f187838f0116fc50f825d329224751bb023752bdf8f1a",
                "DPLBAsyncMPClient.process_engine_outputs":
                    "e24df2c7e86775c7878b6fc165cab95f12ae165ebe54aaf8eff5241cdf191722",
                "DPLBAsyncMPClient.__init__":
                    "373a61bbaad2573e68f30115ede87f8084890e46a1ea62f04bdd2e8ea9157fd0",
            },
        },
    ],
    "lookup_memo": [
        {
            "name": "0.32.0-0.33.0",
            "releases": ("0.32.0", "0.33.0"),
            "semantics": "",
            "digests": {
                "HybridKVCacheCoordinator.find_longest_cache_hit":
                    "f0bf6d6d10cbc235070eb5046dbd5e9332fb25f97ed3c8dfd56546f93fbc952e",
                "FullAttentionManager.find_longest_cache_hit":
                    "8df01074d130e489fc4ebe43eb22ec5b179364193e7aa2c8174bae3121af40d0",
                "SlidingWindowManager.find_longest_cache_hit":
                    "9f8085983e4e2ad9b10e6e95e81831d2a1beb3b889dc5b1644c22d71caf9cc84",
                "CircularBufferManager.find_longest_cache_hit":
                    "236ebadc76e5231ff37a33ac65d14a784997b440bbf7b1b6f00c896e9420effb",
                "ChunkedLocalAttentionManager.find_longest_cache_hit":
                    "330877e60761a6f3abfaa8294037062f2b4a9c1c006ed81f691a2e369b59d6df",
                "MambaManager.find_longest_cache_hit":
                    "435ff3bc9d4189dec872869717b7f34c68641232947bdb643f693115178a5114",
                "CrossAttentionManager.find_longest_cache_hit":
                    "07c145cddc01a21ce50eaa1edad46306b9b503a2504c96763ae557dae02b5243",
                "_HiSparseAuxiliaryManager.find_longest_cache_hit":
                    "236ebadc76e5231ff37a33ac65d14a784997b440bbf7b1b6f00c896e9420effb",
                "BlockPool.get_cached_block":
                    "f9672506e4244cbcd92702318a9ae1e4d0dd91403521e0cb38e5828c9ea3c543",
                "BlockPool._insert_block_hash":
                    "e80b9284e2e3b1a63f838d0383730eff33b73ae54e7a142d2a33e1ef5e576ba8",
                "BlockPool._remove_cached_block_hashes":
                    "d7524ce6f1e12adf0b5d5535f06fcb3b31328ac934624e3ddb47abc3982372e5",
                "BlockPool.reset_prefix_cache":
                    "ca13cdde0502c0d8082d2bac3ffffb5b26b066ce06cce67e76e32c7379e2eb44",
                "BlockHashToBlockMap.__init__":
                    "2742fe9946b6f8436ee6e2366f2ee13ab4addecbceac9c36d8dee08d8c570c94",
                "BlockHashToBlockMap.get_one_block":
                    "f7ac7ed2fbd7e9e74e7cd9e4405079e7e5af5a5b7aaee63d939b55474b2f7258",
                "BlockHashToBlockMap.contain":
                    "858fe07157b3c765170c8075254721fa33b4149fef4bf0da01cfce63d0b78900",
                "BlockHashToBlockMap.insert":
                    "1bf0424a63765e0d88fc3de8db7431960144806601b29da0428a0c78702b4322",
                "BlockHashToBlockMap.pop":
                    "3fbac1b299538f1d37bef7d3b25fd0b05585a9be2ed02720ec6eaa4d6736d876",
                "make_block_hash_with_group_id":
                    "d51da817a4ac06b764cb7e427a00e5789a5a85d57e96fa457d5527f3620fabfe",
                "resolve_block_hashes":
                    "82dc8308cbdfee2da091ef92284bc8c1d4662042170655d2425ec7ea7888f10b",
                "BlockHashListWithBlockSize._get_value_at":
                    "108110e08c3b08ff0a4bb321bee27a3d9e4d971a845259d6ddd440877d116311",
                "Request.update_block_hashes":
                    "bf45097f1b41f436811a669a5384b30816bb4d6460ac7d6b1fe528eca5c5f0d7",
            },
        },
        {
            "name": "0.34.0",
            "releases": ("0.34.0",),
            "semantics": "",
            "digests": {
                "HybridKVCacheCoordinator.find_longest_cache_hit":
                    "f0bf6d6d10cbc235070eb5046dbd5e9332fb25f97ed3c8dfd56546f93fbc952e",
                "FullAttentionManager.find_longest_cache_hit":
                    "8df01074d130e489fc4ebe43eb22ec5b179364193e7aa2c8174bae3121af40d0",
                "SlidingWindowManager.find_longest_cache_hit":
                    "9f8085983e4e2ad9b10e6e95e81831d2a1beb3b889dc5b1644c22d71caf9cc84",
                "CircularBufferManager.find_longest_cache_hit":
                    "236ebadc76e5231ff37a33ac65d14a784997b440bbf7b1b6f00c896e9420effb",
                "ChunkedLocalAttentionManager.find_longest_cache_hit":
                    "330877e60761a6f3abfaa8294037062f2b4a9c1c006ed81f691a2e369b59d6df",
                "MambaManager.find_longest_cache_hit":
                    "435ff3bc9d4189dec872869717b7f34c68641232947bdb643f693115178a5114",
                "CrossAttentionManager.find_longest_cache_hit":
                    "07c145cddc01a21ce50eaa1edad46306b9b503a2504c96763ae557dae02b5243",
                "_HiSparseAuxiliaryManager.find_longest_cache_hit":
                    "236ebadc76e5231ff37a33ac65d14a784997b440bbf7b1b6f00c896e9420effb",
                "BlockPool.get_cached_block":
                    "f9672506e4244cbcd92702318a9ae1e4d0dd91403521e0cb38e5828c9ea3c543",
                "BlockPool._insert_block_hash":
                    "6b8dcb75d196a700a792b58ac6beb62279066fe580056caf24837bf5e74ce67d",
                "BlockPool._remove_cached_block_hashes":
                    "7cebce2ad10a7841630976fa38a4e34d361e2e5d5ab2bdeff00f6539b2b347a4",
                "BlockPool.reset_prefix_cache":
                    "6d9a173c32ae4271cff94cbffbe5b6b6bcc9a3ea7e8a7c4a93557a3ad369d430",
                "BlockHashToBlockMap.__init__":
                    "cc9466e3a3d1d358e49a7911625d0476f6077de68465dc0638ffd46d2bba4d21",
                "BlockHashToBlockMap.get_one_block":
                    "95aaec9d5a74f65cbb04ba8408a50335dd0f39125ddf2e3bea62d0a8b9541667",
                "BlockHashToBlockMap.contain":
                    "1ad84a86c3118c1ba6a9aaf18f6eb516a251bfc941fa0b43094ed55406386625",
                "BlockHashToBlockMap.insert":
                    "a0d149c12af1acd3c84ef7774739d6d030616dbdd59ff1879422c1f8203a824f",
                "BlockHashToBlockMap.pop":
                    "09fa0bb387655187233d3fc0f587e5e151d01c32e4f2dd74d053ed34f6b74ffa",
                "make_block_hash_with_group_id":
                    "d51da817a4ac06b764cb7e427a00e5789a5a85d57e96fa457d5527f3620fabfe",
                "resolve_block_hashes":
                    "82dc8308cbdfee2da091ef92284bc8c1d4662042170655d2425ec7ea7888f10b",
                "BlockHashListWithBlockSize._get_value_at":
                    "108110e08c3b08ff0a4bb321bee27a3d9e4d971a845259d6ddd440877d116311",
                "Request.update_block_hashes":
                    "bf45097f1b41f436811a669a5384b30816bb4d6460ac7d6b1fe528eca5c5f0d7",
            },
        },
    ],
}
