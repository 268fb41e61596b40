/* avxvnni_gemm_vs_peak.c -- issue #23's AVX-VNNI figure: h3cy's avxvnni int8 GEMM against
 * the vpdpbusd instruction's peak, measured in the same process, round after round (a VM's
 * clock and neighbours drift, so a ratio is only fair within one round):
 *   peak  14 independent VEX vpdpbusd chains (5-cycle latency, 2 a cycle on Golden Cove);
 *   ukr   the 6x16 micro-kernel on one A panel and 8 B panels of 1024 k (L1/L2-resident);
 *   gemm  h3_linear_forward, int8 weights, M x 7168 x 5376 (the DiT's qkv), 1 thread,
 *         best of 3 calls.
 * GOP/s count 2 per multiply-add.  Built and run by bench/avxvnni_gemm_vs_peak.py (CPUs
 * with AVX-VNNI only: the peak loop is the raw instruction).
 *     avxvnni_gemm_vs_peak [M=512] [rounds=3] */
#include "gemm_impl.h"
#include "h3.h"
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define X14(op) op " %%ymm0,%%ymm1,%%ymm2\n\t" op " %%ymm0,%%ymm1,%%ymm3\n\t" op " %%ymm0,%%ymm1,%%ymm4\n\t" \
 op " %%ymm0,%%ymm1,%%ymm5\n\t" op " %%ymm0,%%ymm1,%%ymm6\n\t" op " %%ymm0,%%ymm1,%%ymm7\n\t" op " %%ymm0,%%ymm1,%%ymm8\n\t" \
 op " %%ymm0,%%ymm1,%%ymm9\n\t" op " %%ymm0,%%ymm1,%%ymm10\n\t" op " %%ymm0,%%ymm1,%%ymm11\n\t" op " %%ymm0,%%ymm1,%%ymm12\n\t" \
 op " %%ymm0,%%ymm1,%%ymm13\n\t" op " %%ymm0,%%ymm1,%%ymm14\n\t" op " %%ymm0,%%ymm1,%%ymm15\n\t"
static double peak(void){ long n=20000000; double t=now();
  for(long i=0;i<n;i++) __asm__ volatile(X14("%{vex%} vpdpbusd") ::: "xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12","xmm13","xmm14","xmm15");
  t=now()-t; return n*14.0*32*2/t/1e9; }
int main(int argc,char**argv){
  int M=argc>1?atoi(argv[1]):512, N=7168, K=5376, rounds=argc>2?atoi(argv[2]):3;
  const gemm_kernels *kt=&gemm_kernels_avxvnni; int MR=kt->mr, NR=kt->nr, kq=256;
  int8_t *ap=aligned_alloc(64,kq*MR*4); uint8_t *bp=aligned_alloc(64,kq*NR*4*8);
  for(int i=0;i<kq*MR*4;i++) ap[i]=(int8_t)((i*37)%255-127);
  for(int i=0;i<kq*NR*4*8;i++) bp[i]=(uint8_t)((i*91)%255+1);
  float sa[64],sw[64*8],c[6*16*8]; int32_t asum[64]={0};
  for(int i=0;i<64;i++) sa[i]=1; for(int i=0;i<512;i++) sw[i]=1;
  float *w=malloc((size_t)N*K*4), *x=malloc((size_t)M*K*4), *y=malloc((size_t)M*N*4);
  srand(1); for(size_t i=0;i<(size_t)N*K;i++) w[i]=(rand()/(float)RAND_MAX-0.5f);
  for(size_t i=0;i<(size_t)M*K;i++) x[i]=(rand()/(float)RAND_MAX-0.5f);
  h3_err err; h3_pool *pool; h3_pool_create(1,&pool,&err);
  h3_linear_opts o; memset(&o,0,sizeof o); o.wtype=H3_DT_I8; o.isa=H3_ISA_AVXVNNI;
  h3_linear *l; if(h3_linear_create(w,H3_DT_F32,N,K,NULL,&o,&l,&err)){printf("create: %s\n",err.msg);return 1;}
  for(int r=0;r<rounds;r++){
    double pk=peak();
    long reps=20000; double t=now();
    for(long q=0;q<reps;q++) for(int p=0;p<8;p++) kt->ukr_i8(MR,NR,1,kq,ap,bp+p*kq*NR*4,sa,asum,sw+p*16,0,c+p*16,16*8,MR,NR,0);
    double uk=reps*8.0*MR*NR*kq*4*2/(now()-t)/1e9;
    double best=1e9; for(int q=0;q<3;q++){ t=now(); if(h3_linear_forward(l,pool,x,M,y,NULL,NULL,0,&err)){printf("fwd: %s\n",err.msg);return 1;} t=now()-t; if(t<best)best=t; }
    double g=2.0*M*N*K/best/1e9;
    printf("round %d M=%d: peak %.1f  ukr %.1f (%.2f)  gemm %.1f (%.2f)\n",r,M,pk,uk,uk/pk,g,g/pk);
    fflush(stdout);
  }
  return 0;
}
